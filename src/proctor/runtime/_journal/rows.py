"""
Backend-neutral row codecs, argument checks and refusal diagnosis, shared by both backends.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import (
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any

from proctor._digest import compact_json
from proctor._errors import (
    ConfigError,
    FencedError,
    JournalError,
)
from proctor._logging import get_logger
from proctor.runtime._journal.base import (
    EFFECT_STATES,
    QUEUED,
    SPEND_KINDS,
    EffectRow,
    RunRow,
    SpendRow,
)
from proctor.runtime._journal.blobs import pack, pack_action, refs, unpack, unpack_action
from proctor.runtime._records import Disposition

log = get_logger()

__all__ = (
    "json_text",
    "DISPOSITIONS",
    "STEP_FIELDS",
    "STEP_KNOWN",
    "SpendRecord",
    "check_lease",
    "check_worker",
    "clean",
    "dump",
    "dump_opt",
    "effect_row",
    "fenced_error",
    "load",
    "load_opt",
    "key_needles",
    "note_params",
    "of_keys",
    "note_records",
    "note_refs",
    "record_field",
    "run_row",
    "settle_fence",
    "spend_record",
    "spend_rows_of",
    "step_params",
    "step_record",
    "step_refs",
    "task_record",
)


# --------------------------------------------------------------------------------------
# Row and value helpers
# --------------------------------------------------------------------------------------

DISPOSITIONS: tuple[str, ...] = tuple(d.value for d in Disposition)

STEP_FIELDS: tuple[str, ...] = (
    "trace_id",
    "step",
    "kind",
    "action",
    "tool_status",
    "result_fingerprint",
    "state_version",
    "state_delta",
    "remaining",
    "decision",
    "progress",
    "reason",
    "stop_reason",
    "disposition",
    "policy_version",
    "at",
)
STEP_KNOWN = frozenset((*STEP_FIELDS, "run_id", "event"))


#: A spend record as both backends write it: task, run, kind, its amounts (JSON,
#: dimension to amount, in the order given), note, time.
SpendRecord = tuple[str, str, str, str, str, float]


def spend_record(
    task_id: str, run_id: str, amounts: Mapping[str, float], kind: str, note: str
) -> SpendRecord | None:
    """
    The row of one spend record, or None when it has no amounts.

    Every dimension given is kept, a zero too: the record reads back as it was given.

    Raises:
        ConfigError: ``kind`` is not one of :data:`SPEND_KINDS`, a dimension is not
            a name (valid text without U+0000), or an amount is not a finite number.
    """
    if kind not in SPEND_KINDS:
        raise ConfigError(f"spend kind must be one of {', '.join(SPEND_KINDS)}, got {kind!r}")
    values: dict[str, float] = {}
    for dimension, amount in amounts.items():
        # What both databases' JSON readers give back as it was: text, valid
        # Unicode, no U+0000 (SQLite's would cut the name there).
        if not isinstance(dimension, str) or not _valid(dimension) or "\x00" in dimension:
            raise ConfigError(
                f"a spend dimension is a name (valid text without U+0000), got {dimension!r}"
            )
        value = float(amount)
        if not math.isfinite(value):
            raise ConfigError(f"spend of {dimension!r} must be a finite number, got {amount!r}")
        values[dimension] = value
    if not values:
        return None
    # Floats as Python writes them, the shortest text that reads back to the same
    # number: the totals' trigger reads it with the database's JSON reader and adds
    # the very amount given, as the rows of one per dimension did.
    return (task_id, run_id, kind, dump(values), note, time.time())


def spend_rows_of(rows: Iterable[Iterable[Any]]) -> list[SpendRow]:
    """
    A run's spend, one :class:`SpendRow` per dimension, from the rows of the
    ``spend_rows`` query: ``(source, id, name, amount, kind, at)``, where a row of
    an earlier version (source 0) holds one dimension (name and amount), and a
    record (source 1) its amounts as JSON in ``name``, expanded in their order.

    Raises:
        JournalError: a record's amounts are not the JSON object they were written as.
    """
    out: list[SpendRow] = []
    for _source, row_id, name, amount, kind, at in rows:
        if amount is not None:
            out.append(SpendRow(str(name), float(amount), str(kind), float(at)))
            continue
        values = load(name, f"spend record {row_id}")
        if not isinstance(values, dict) or not all(_number(v) for v in values.values()):
            raise JournalError(
                f"spend record {row_id} is corrupt in the journal (its amounts are not "
                "an object of numbers); it is not read as data"
            )
        out.extend(SpendRow(str(d), float(v), str(kind), float(at)) for d, v in values.items())
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _valid(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def dump(value: Any) -> str:
    """
    JSON for a text column. Text that is not valid Unicode (a lone surrogate, which
    JSON from an agent may carry) is kept exactly, as an escape.
    """
    text = compact_json(value)
    return text if _valid(text) else compact_json(value, ascii=True)


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(text: str | None) -> str | None:
    """
    JSON text for a text column: a surrogate in it (it can only stand in a JSON
    string) becomes its ``\\uXXXX`` escape, which reads back to the same value.
    """
    if text is None or _valid(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean(text: str) -> str:
    """A plain text column holds valid Unicode: a lone surrogate becomes U+FFFD."""
    if _valid(text):
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def dump_opt(value: Any) -> str | None:
    return None if value is None else dump(value)


def load(text: str, where: str = "a journal row") -> Any:
    """
    Read a JSON column. A row that does not read (a corrupted file) is reported
    with what it is, and never parsed as data.

    Raises:
        JournalError: the column is not the JSON it was written as.
    """
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise JournalError(
            f"{where} is corrupt in the journal ({type(exc).__name__}: {exc}); "
            "it is not read as data"
        ) from None


def load_opt(text: str | None, where: str = "a journal row") -> Any:
    return None if text is None else load(text, where)


# The key of a step's checksum in its ``extra`` column.
_CHECKSUM = "_checksum"
# The key of the columns of a step that refer to blobs, in its ``extra`` column.
_PACKED = "_packed"


def _step_checksum(values: Sequence[Any]) -> str:
    """A digest of a step row's columns as stored, in column order."""
    # Numbers as floats: a column may hand back 1.0 for the 1 it was given.
    plain = [v if v is None or isinstance(v, str) else repr(float(v)) for v in values]
    text = compact_json(plain, ascii=True)
    return hashlib.blake2b(text.encode("ascii"), digest_size=16).hexdigest()


_STEP_SUMMED = (*STEP_FIELDS, "event")


def fenced_error(
    where: str, run_id: str, epoch: int, status: str, current: int, what: str
) -> FencedError:
    """Say why a fenced write was refused, and log it."""
    if current != epoch:
        why = f"its epoch is {current}, the writer's is {epoch}"
    elif status == QUEUED:
        why = "it is queued: claim it first"
    else:
        why = f"it has ended ({status})"
    log.warning("journal.fenced", run_id=run_id, epoch=epoch, refused=what, why=why)
    return FencedError(f"journal {where}: {what} of run {run_id} refused: {why}")


def settle_fence(state: str, run_id: str | None, epoch: int | None) -> bool:
    """Check the arguments of ``settle_effect``; return whether the write is fenced."""
    if state not in EFFECT_STATES:
        raise ConfigError(f"effect state must be one of {', '.join(EFFECT_STATES)}, got {state!r}")
    if (run_id is None) != (epoch is None):
        raise ConfigError("settle_effect fences by run_id and epoch together: give both or neither")
    return run_id is not None


def check_worker(worker: str) -> None:
    if not worker:
        raise ConfigError("a claim needs a worker name, got an empty one")


def check_lease(lease_seconds: float) -> None:
    if not (math.isfinite(lease_seconds) and lease_seconds >= 0):
        raise ConfigError(
            f"a lease lasts a finite, non-negative number of seconds, got {lease_seconds!r}"
        )


def record_field(record: Mapping[str, Any], name: str, what: str) -> Any:
    try:
        return record[name]
    except KeyError:
        raise ConfigError(f"{what} record lacks the field {name!r}") from None


def step_params(run_id: str, epoch: int, record: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten a trace record into the parameters of ``_Sql.append_step``."""
    params = {name: record_field(record, name, "step") for name in STEP_FIELDS}
    own = record.get("run_id", run_id)
    if own != run_id:
        raise ConfigError(f"step {params['step']} belongs to run {own!r}, not to run {run_id!r}")
    params["run_id"] = run_id
    params["epoch"] = epoch
    params["state_delta"] = dump(params["state_delta"])
    params["remaining"] = dump(params["remaining"])
    params["stop_reason"] = dump_opt(params["stop_reason"])
    params["progress"] = bool(params["progress"])
    params["reason"] = clean(str(params["reason"]))
    # Large contents go to blobs, once; the row keeps references and says so.
    packed: list[str] = []
    blobs: dict[str, bytes] = {}
    action, found = pack_action(params["action"])
    if found:
        packed.append("action")
        blobs.update(found)
    params["action"] = dump(action) if found else json_text(params["action"])
    event, shared = _share(record.get("event"), record["action"], record["state_delta"])
    if "candidate" in shared:
        params["state_delta"] = "{}"
    event, found = pack(event)
    if found:
        packed.append("event")
        blobs.update(found)
    params["event"] = dump_opt(event)
    params["blobs"] = sorted(blobs.items())
    # Fields this schema has no column for yet are kept, not dropped.
    extra = {key: value for key, value in record.items() if key not in STEP_KNOWN}
    if packed:
        extra[_PACKED] = packed
    if shared:
        extra[_SHARED] = shared
    extra_text = dump(extra) if extra else None
    # A checksum over every column as stored, kept with them: a row changed on
    # disk is told from a valid one when it is read.
    summed = [params[name] for name in _STEP_SUMMED]
    extra[_CHECKSUM] = _step_checksum([run_id, *summed, extra_text])
    params["extra"] = dump(extra)
    return params


def _share(event: Any, action: Any, delta: Any) -> tuple[Any, list[str]]:
    """
    Take out of an action step's event what the row holds already.

    The event of an action repeats the step's action (its tool and arguments),
    and the step's state delta is often just the event's candidate: those are
    stored once, and :func:`_unshare` puts them back. Only exact copies are
    shared (the same JSON, types and characters included: the action's
    canonical text is NFC, an event's arguments need not be); the arguments
    come back in the action's canonical key order.

    Returns:
        The event to store, and what was taken out of it (``action``) or of the
        state delta (``candidate``).
    """
    if not (
        isinstance(event, dict)
        and event.get("type") == "action"
        and list(event)[:3] == list(_EVENT_HEAD)
    ):
        return event, []
    shared: list[str] = []
    if isinstance(action, str) and _same_action(action, event):
        event = {"type": "action", **{k: v for k, v in event.items() if k not in _EVENT_HEAD}}
        shared.append("action")
    elif isinstance(action, str) and action.startswith("{"):
        try:
            same = json.loads(action)
        except ValueError:
            same = None
        if (
            isinstance(same, dict)
            and set(same) == {"tool", "args"}
            and same["tool"] == event["tool"]
            and _exact(same["args"]) == _exact(event["args"])
        ):
            event = {"type": "action", **{k: v for k, v in event.items() if k not in _EVENT_HEAD}}
            shared.append("action")
    candidate = event.get("candidate")
    if isinstance(candidate, str) and delta == {"candidate": candidate}:
        shared.append("candidate")
    return event, shared


def _unshare(event: Any, action: str | None, shared: list[str], where: str) -> tuple[Any, Any]:
    """Put back what :func:`_share` took out: the event, and the state delta if it was shared."""
    delta: Any = None
    if "action" in shared:
        same = load(action, where) if action is not None else None
        if not (isinstance(event, dict) and isinstance(same, dict) and "tool" in same):
            raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
        rest = {k: v for k, v in event.items() if k != "type"}
        event = {"type": event.get("type"), "tool": same["tool"], "args": same.get("args"), **rest}
    if "candidate" in shared:
        if not isinstance(event, dict):
            raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
        delta = {"candidate": event.get("candidate")}
    return event, delta


def _same_action(action: str, event: dict[str, Any]) -> bool:
    """
    Whether ``action`` is, character for character, the event's tool and arguments
    as :func:`~proctor._digest.canonical_json` writes an action that needed no
    normalizing (the common case, told with one ``dumps``): the text reads back
    to the same values, types included, so it is an exact copy.
    """
    try:
        text = compact_json({"args": event["args"], "tool": event["tool"]}, sort_keys=True)
    except (TypeError, ValueError):
        return False
    return text == action


def _exact(value: Any) -> str:
    """JSON that tells apart what ``==`` does not (``True`` and ``1``, ``1`` and ``1.0``)."""
    return compact_json(value, ascii=True, sort_keys=True)


# The keys an action's event starts with, as ``event_to_json`` writes them.
_EVENT_HEAD = ("type", "tool", "args")
# The key of what a step's event shares with its row, in its ``extra`` column.
_SHARED = "_shared"


def step_refs(rows: Iterable[Any]) -> set[str]:
    """The blobs that rows of ``_Sql.steps`` refer to (read them with the rows)."""
    return refs(text for row in rows for text in (row[4], row[17]))


def _check_sum(row: Any, extras: dict[str, Any], where: str) -> None:
    """Check a step row's checksum (taking it out of ``extras``), if it has one."""
    checksum = extras.pop(_CHECKSUM, None)
    if checksum is None:
        return
    # The columns in the order they were summed: run, trace, then the rest.
    columns = [row[1], row[0], *row[2:11], bool(row[11]), *row[12:18]]
    extra_text = dump(extras) if extras else None
    try:
        summed = _step_checksum([*columns, extra_text])
    except (TypeError, ValueError):
        summed = None  # a column of another type than written (bytes, say)
    if summed != checksum:
        raise JournalError(
            f"{where} is corrupt in the journal (its checksum does not match its "
            "columns); it is not read as data"
        )


def step_record(row: Any, blobs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """
    Rebuild a trace record from a row of ``_Sql.steps``, with the blobs it refers to.

    Raises:
        JournalError: the row, or a blob it refers to, is corrupt.
    """
    (
        trace_id,
        run_id,
        step,
        kind,
        action,
        tool_status,
        result_fingerprint,
        state_version,
        state_delta,
        remaining,
        decision,
        progress,
        reason,
        stop_reason,
        disposition,
        policy_version,
        at,
        event,
        extra,
    ) = row
    where = f"step {step} of run {run_id}"
    extras = load(extra, where) if extra is not None else {}
    if not isinstance(extras, dict):
        raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
    _check_sum(row, extras, where)
    packed = extras.pop(_PACKED, [])
    if not isinstance(packed, list):
        raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
    if "action" in packed:
        action = unpack_action(load(action, where), blobs or {}, where)
    decoded = load_opt(event, where)
    if "event" in packed:
        decoded = unpack(decoded, blobs or {}, where)
    shared = extras.pop(_SHARED, [])
    if not isinstance(shared, list):
        raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
    decoded, delta = _unshare(decoded, action, shared, where)
    record = {
        "trace_id": trace_id,
        "run_id": run_id,
        "step": step,
        "kind": kind,
        "action": action,
        "tool_status": tool_status,
        "result_fingerprint": result_fingerprint,
        "state_version": state_version,
        "state_delta": delta if delta is not None else load(state_delta, where),
        "remaining": load(remaining, where),
        "decision": decision,
        "progress": bool(progress),
        "reason": reason,
        "stop_reason": load_opt(stop_reason, where),
        "disposition": disposition,
        "policy_version": policy_version,
        "at": at,
        "event": decoded,
    }
    record.update(extras)
    return record


def task_record(row: Any) -> dict[str, Any]:
    """A tasks row, as both backends select it, as plain data."""
    tid, goal, spec, contract_version, created_at = row
    return {
        "task_id": tid,
        "goal": goal,
        "spec": load(spec, f"task {tid}"),
        "contract_version": contract_version,
        "created_at": created_at,
    }


def note_params(body: dict[str, Any]) -> tuple[str, int | None, list[tuple[str, bytes]]]:
    """A note's body as its columns store it (``body``, ``packed``) and its blobs."""
    packed, blobs = pack(body)
    return dump(packed), (1 if blobs else None), sorted(blobs.items())


def key_needles(keys: Sequence[str]) -> list[str]:
    """How an effect note's body spells each key (``dump``'s JSON): what to look for."""
    return [f'"key":{json.dumps(key)}' for key in keys]


def of_keys(notes: list[dict[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """The notes whose body's ``key`` is one of ``keys``."""
    wanted = set(keys)
    return [n for n in notes if isinstance(n["body"], dict) and n["body"].get("key") in wanted]


def note_refs(rows: Iterable[Any]) -> set[str]:
    """The blobs that notes rows refer to (read them with the rows)."""
    return refs(row[3] for row in rows if row[5])


def note_records(
    rows: Iterable[Any], blobs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """
    Notes rows, as both backends select them, as plain data (bodies decoded).

    Raises:
        JournalError: a body, or a blob it refers to, is corrupt.
    """
    records = []
    for nid, rid, kind, body, at, packed in rows:
        where = f"note {nid} of run {rid}"
        value = load(body, where)
        if packed:
            value = unpack(value, blobs or {}, where)
        records.append({"id": nid, "run_id": rid, "kind": kind, "body": value, "at": at})
    return records


def effect_row(row: Any) -> EffectRow:
    """An effects row, as both backends select it, as a record."""
    return EffectRow(
        key=row[0],
        run_id=row[1],
        task_id=row[2],
        step=row[3],
        tool=row[4],
        target=row[5],
        args_hash=row[6],
        state=row[7],
        created_at=row[8],
        updated_at=row[9],
        outcome=load_opt(row[10], f"effect {row[0]} of run {row[1]}"),
    )


def run_row(row: Any) -> RunRow:
    """Build a :class:`RunRow` from a row of ``RUN_COLUMNS``."""
    return RunRow(
        run_id=row[0],
        task_id=row[1],
        parent_run_id=row[2],
        epoch=row[3],
        status=row[4],
        disposition=row[5],
        stop_reason=load_opt(row[6], f"run {row[0]}"),
        policy=load(row[7], f"run {row[0]}"),
        policy_version=row[8],
        host=row[9],
        started_at=row[10],
        ended_at=row[11],
        candidate_digest=row[12],
        handoff=load_opt(row[13], f"run {row[0]}"),
        goal=row[14],
        steps=row[15],
        owner=row[16],
        lease_until=row[17],
        pid=row[18],
        heartbeat_at=row[19],
        heartbeat_every=row[20],
        waiting=row[21],
        waiting_since=row[22],
        workspace=row[23],
    )
