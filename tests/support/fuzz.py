"""
Hypothesis strategies for what reaches the runtime from outside, and the checks
that what they make never crashes it.

Four inputs: task files, trajectories, proposals and journal rows. Each check
takes one generated case and raises :class:`Crash` when the runtime answered
with anything but its own answer (a result, a typed refusal, a
:class:`~proctor.ProctorError` of the expected kind). ``tests/test_fuzz.py``
runs them briefly in CI; ``benchmarks/fuzz.py`` runs them long.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from proctor._boundary import Limits, dumps_utf8
from proctor._errors import ConfigError, JournalError, TrajectoryError
from proctor._wire import to_jsonable
from proctor.runtime._control.controller import proposal_refusal
from proctor.runtime._control.trace import _action_event, _message_event
from proctor.runtime._journal.blobs import BLOB_MIN
from proctor.runtime._journal.rows import (
    dump,
    effect_row,
    note_records,
    run_row,
    step_params,
    step_record,
    task_record,
)
from proctor.runtime._journal.schema import STEP_COLUMNS
from proctor.runtime._progress.judge import Act, Judge, TaskFacts, normalized_action
from proctor.runtime._progress.policy import Policy
from proctor.runtime._progress.trajectory import parse_trajectory, replay
from proctor.runtime._records import (
    ActionEvent,
    ActionResult,
    Claim,
    Completion,
    Decision,
    Message,
    MessageKind,
    Proposal,
    Round,
    ToolCall,
    ToolResult,
    ToolStatus,
    TraceRecord,
    TrajectoryEvent,
)
from proctor.runtime._task import parse_task
from proctor.runtime._tools.registry import ToolRegistry

__all__ = (
    "Crash",
    "check_journal_file",
    "check_journal_row",
    "check_proposal",
    "check_task_file",
    "check_trajectory",
    "journal_flips",
    "journal_rows",
    "proposals",
    "task_files",
    "trajectories",
)


class Crash(AssertionError):
    """The runtime answered a case with something other than its own answer."""


# -- plain values, the hostile ones included ----------------------------------------------

_NASTY_CHARS = ["\ud800", "\udcff", "\udfff", "\x00", "é", "\u2028", "\ufeff", "'", '"', "\\"]
texts = st.one_of(
    st.text(max_size=20),
    st.text(alphabet=st.sampled_from(_NASTY_CHARS + list("ab ./-=$")), max_size=20),
)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


deep_values = st.integers(min_value=0, max_value=300).map(_deep)
any_value = st.one_of(values, deep_values)

# -- proposals -------------------------------------------------------------------------------

TOOLS = ("read_file", "write_file", "edit_file", "delete_file", "list_files", "run_command")
_tool_names = st.one_of(st.sampled_from(TOOLS), texts)
_args = st.one_of(
    st.dictionaries(st.sampled_from(("path", "content", "cmd", "old", "new")), any_value),
    st.dictionaries(texts, any_value, max_size=5),
)
tool_calls = st.builds(ToolCall, tool=_tool_names, args=_args, poll=st.booleans())
_strs = st.lists(texts, max_size=3).map(tuple)
proposals: st.SearchStrategy[Proposal] = st.one_of(
    tool_calls,
    st.builds(Round, calls=st.lists(tool_calls, min_size=1, max_size=3).map(tuple)),
    st.builds(
        Message,
        kind=st.sampled_from(list(MessageKind)),
        text=texts,
        sources=_strs,
        blockers=_strs,
    ),
    st.builds(Completion, summary=texts),
    st.builds(
        Claim,
        status=st.sampled_from(["blocked", "needs_input"]),
        condition=texts,
        evidence=_strs,
        reason=texts,
    ),
)

_REGISTRY = ToolRegistry.builtin()
_LIMITS = Limits()


def check_proposal(proposal: Proposal) -> str:
    """
    The boundary refuses the proposal with a reason, or everything after it
    takes it: the decision core, the trajectory event, the journal's codecs and
    the JSON an agent is sent.
    """
    try:
        refusal = proposal_refusal(proposal, _REGISTRY, _LIMITS)
    except Exception as exc:
        raise Crash(f"the boundary raised {exc!r} on {proposal!r:.200}") from exc
    if refusal is not None:
        if not isinstance(refusal, str) or not refusal:
            raise Crash(f"a refusal without a reason: {refusal!r}")
        return "refused"
    try:
        judge = Judge(TaskFacts(kind="build", checks=("t",)), Policy(), digest="d0")
        event: TrajectoryEvent | None = None
        if isinstance(proposal, ToolCall | Round):
            calls = (proposal,) if isinstance(proposal, ToolCall) else proposal.calls
            items = []
            for call in calls:
                normalized_action(call)
                judge.admit(call)
                result = ToolResult(ToolStatus.ERROR, json.dumps(call.args)[:200], exit_code=1)
                event = _action_event(call, result, None)
                items.append(Act(call, result, "d0", "d0"))
            rulings = judge.round(items)
            if not all(isinstance(r.decision, Decision) for r in rulings):
                raise Crash("a ruling without a decision")
        elif isinstance(proposal, Message):
            judge.message(proposal)
            event = _message_event(proposal)
        elif isinstance(proposal, Claim):
            judge.claim(proposal)
        else:
            judge.message(Message(MessageKind.FINAL_ANSWER, proposal.summary))
        dump(to_jsonable(event))
        dumps_utf8(to_jsonable(event))
        return "admitted"
    except Crash:
        raise
    except Exception as exc:
        raise Crash(
            f"an admitted proposal broke {type(exc).__name__}: {exc} ({proposal!r:.200})"
        ) from exc


# -- trajectories ------------------------------------------------------------------------------

_HEADER = {"format": "proctor.trajectory", "version": 1, "task": {"kind": "build"}}
_event_types = st.sampled_from(
    ["action", "message", "verdict", "signal", "user", "claim", "refused", "nonsense"]
)


_clean_args = st.dictionaries(
    st.sampled_from(("path", "content", "cmd", "old", "new", "url")), st.text(max_size=12)
)


@st.composite
def _clean_events(draw: st.DrawFn) -> dict[str, Any]:
    """An event of the format, with ordinary values: what a replay decides on."""
    kind = draw(st.sampled_from(["action", "action", "action", "message", "verdict", "user"]))
    if kind == "action":
        result: dict[str, Any] = {"status": draw(st.sampled_from(["ok", "error", "timeout"]))}
        if draw(st.booleans()):
            result["exit_code"] = draw(st.integers(0, 3))
        result["output"] = draw(st.sampled_from(["", "ok", "FAILED test_x", "E  assert 1"]))
        event: dict[str, Any] = {
            "type": "action",
            "tool": draw(st.sampled_from([*TOOLS, "fetch", "custom"])),
            "args": draw(_clean_args),
            "result": result,
        }
        if draw(st.integers(0, 3)) == 0:
            event["round"] = draw(st.integers(1, 3))
        return event
    if kind == "message":
        kinds = [k.value for k in MessageKind]
        return {"type": "message", "kind": draw(st.sampled_from(kinds)), "text": draw(texts)}
    if kind == "verdict":
        return {"type": "verdict", "check": "t", "passed": draw(st.booleans())}
    return {"type": "user", "text": draw(st.text(max_size=10))}


@st.composite
def _events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(_event_types)
    event: dict[str, Any] = {"type": kind}
    if kind == "action":
        event["tool"] = draw(st.one_of(st.sampled_from(TOOLS), any_value))
        event["args"] = draw(st.one_of(_args, any_value))
        event["result"] = draw(
            st.one_of(
                st.fixed_dictionaries(
                    {"status": st.sampled_from(["ok", "error", "timeout"])},
                    optional={"exit_code": any_value, "output": st.one_of(texts, any_value)},
                ),
                any_value,
            )
        )
        if draw(st.booleans()):
            event["round"] = draw(any_value)
    elif kind == "message":
        event["kind"] = draw(st.one_of(st.sampled_from([k.value for k in MessageKind]), texts))
        event["text"] = draw(st.one_of(texts, any_value))
    elif kind == "verdict":
        event["check"] = draw(st.one_of(texts, any_value))
        event["passed"] = draw(st.one_of(st.booleans(), any_value))
        if draw(st.booleans()):
            event["of_event"] = draw(st.one_of(st.integers(-3, 30), any_value))
    elif kind == "signal":
        event["name"] = draw(st.one_of(st.sampled_from(["deadline", "user_stop"]), texts))
    elif kind in ("user", "refused"):
        event["text" if kind == "user" else "reason"] = draw(st.one_of(texts, any_value))
    elif kind == "claim":
        event["status"] = draw(st.one_of(st.sampled_from(["blocked", "needs_input"]), texts))
        event["condition"] = draw(texts)
        event["evidence"] = draw(st.one_of(st.lists(texts, max_size=2), any_value))
        event["reason"] = draw(texts)
    if draw(st.integers(0, 9)) == 0:
        event[draw(texts)] = draw(any_value)
    return event


def _line(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except ValueError:
        return json.dumps(value, ensure_ascii=False, check_circular=False, default=str)


@st.composite
def _mutated(draw: st.DrawFn, line: str) -> str:
    """Text damaged the way files are: a character replaced, dropped, a number blown up."""
    how = draw(st.integers(0, 5))
    if how == 0 or not line:
        return line
    at = draw(st.integers(0, max(0, len(line) - 1)))
    if how == 1:
        return line[:at] + line[at + 1 :]
    if how == 2:
        return (
            line[:at] + draw(st.sampled_from([*_NASTY_CHARS, "[", "{", "1e999", "NaN"])) + line[at:]
        )
    if how == 3:
        return line[:at]
    if how == 4:
        return line[:at] + "[" * draw(st.integers(1, 3000)) + line[at:]
    return line[:at] + "9" * draw(st.integers(20, 6000)) + line[at:]


@st.composite
def trajectories(draw: st.DrawFn) -> list[str]:
    """A trajectory's lines: a header (usually valid) and events, some of them damaged."""
    if draw(st.booleans()):
        # Half are well formed, so that replay itself is driven, not only parsing.
        events = draw(st.lists(_clean_events(), max_size=30))
        return [_line(_HEADER), *(_line(e) for e in events)]
    header = draw(st.one_of(st.just(_HEADER), st.dictionaries(texts, any_value, max_size=3)))
    lines = [_line(header)]
    for event in draw(st.lists(_events(), max_size=12)):
        line = _line(event)
        lines.append(draw(_mutated(line)) if draw(st.integers(0, 4)) == 0 else line)
    return lines


def check_trajectory(lines: list[str]) -> str:
    """A trajectory is refused with the line that is wrong, or replays to a result."""
    try:
        trajectory = parse_trajectory(lines)
    except TrajectoryError:
        return "refused"
    except Exception as exc:
        raise Crash(f"parsing raised {type(exc).__name__}: {exc}") from exc
    try:
        result = replay(trajectory)
        json.dumps(result.to_json())
    except Exception as exc:
        raise Crash(f"replay raised {type(exc).__name__}: {exc}") from exc
    return "replayed"


# -- task files ---------------------------------------------------------------------------------

_TOML_VALUES = st.one_of(
    st.sampled_from(
        [
            "1e308",
            "inf",
            "nan",
            "-0.0",
            "07:32:00",
            "1979-05-27",
            "1979-05-27T07:32:00Z",
            "9999999999999999999999",
            "true",
            '"\\u0000"',
            '"/"',
            '"../../.."',
            "{a=1}",
            "[[1]]",
            "[]",
            '""',
            '"' + "x" * 300 + '"',
            "[" * 40 + "]" * 40,
            '"\\ud800"',
        ]
    ),
    st.integers().map(str),
    texts.map(lambda t: json.dumps(t, ensure_ascii=True)),
)
_KEYS = st.sampled_from(
    [
        "goal",
        "workspace",
        "kind",
        "id",
        "command_time_limit",
        "ignore",
        "template",
        "name",
        "run",
        "expect_exit",
        "time_limit",
        "required",
        "junit",
        "files",
        "pattern",
        "protected",
        "scope",
        "required_files",
        "steps",
        "wall_seconds",
        "reserve",
        "stall_threshold",
        "script",
        "model",
        "depth",
        "output_chars",
        "snapshot_bytes",
    ]
)
_BASE = [
    "[task]",
    'goal = "fix it"',
    'workspace = "project"',
    "",
    "[[checks]]",
    'name = "tests"',
    'run = ["true"]',
    "",
    "[contract]",
    'protected = ["tests/**"]',
    "",
    "[budget]",
    "steps = 10",
    "",
    "[limits]",
    "depth = 32",
    "",
    "[actor]",
    'script = "agent.jsonl"',
]


@st.composite
def task_files(draw: st.DrawFn) -> bytes:
    """A task file's bytes: a valid one with lines set to hostile values, or damaged."""
    lines = list(_BASE)
    # Often one hostile line or none, so that loading also gets past the first.
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 4]))):
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, f"{draw(_KEYS)} = {draw(_TOML_VALUES)}")
    text = "\n".join(lines) + "\n"
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    return data


def task_home(root: Path) -> Path:
    """A directory a task file can name: ``project/`` and ``agent.jsonl``."""
    (root / "project").mkdir(parents=True, exist_ok=True)
    (root / "agent.jsonl").write_text('{"type": "complete"}\n')
    return root


def check_task_file(home: Path, data: bytes) -> str:
    """A task file loads, or is refused with a ConfigError that says where."""
    path = home / "task.toml"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        from proctor.runtime._task import load_task

        path.write_bytes(data)
        try:
            load_task(path)
        except ConfigError as exc:
            if not str(exc).startswith(str(path)):
                raise Crash(f"a task-file error that does not say where: {exc}") from exc
            return "refused"
        except Exception as exc:
            raise Crash(f"loading raised {type(exc).__name__}: {exc}") from exc
        raise Crash("a task file that is not UTF-8 was accepted") from None
    try:
        parse_task(text, path)
    except ConfigError as exc:
        if not str(exc).startswith(str(path)):
            raise Crash(f"a task-file error that does not say where: {exc}") from exc
        return "refused"
    except Exception as exc:
        raise Crash(f"parsing raised {type(exc).__name__}: {exc}") from exc
    return "loaded"


# -- journal rows ---------------------------------------------------------------------------------


def _record(n: int, content: str = "") -> dict[str, Any]:
    args = {"path": "a.py", "content": content} if content else {}
    record = TraceRecord(
        trace_id="t",
        run_id="run-1",
        step=n,
        kind="action",
        action='{"tool":"write_file"}',
        tool_status=ToolStatus.OK,
        result_fingerprint="fp",
        state_version=n,
        state_delta={"files": ["a.py"]},
        remaining={"steps": 5.0},
        decision=Decision.CONTINUE,
        progress=True,
        reason="new work",
        stop_reason=None,
        disposition=None,
        policy_version="p1",
        at=1_700_000_000.0 + n,
        event=ActionEvent(tool="write_file", args=args, result=ActionResult(status="ok")),
    )
    data: dict[str, Any] = to_jsonable(record)
    return data


# The order step_record reads a row in: the schema's own column list.
_STEP_ORDER = tuple(name.strip() for name in STEP_COLUMNS.split(","))


@st.composite
def journal_rows(draw: st.DrawFn) -> tuple[str, tuple[Any, ...]]:
    """A row as a backend reads it back: a valid one with columns changed, or garbage."""
    kind = draw(st.sampled_from(["step", "blob step", "run", "note", "effect", "task"]))
    column_values = st.one_of(st.none(), st.integers(), st.floats(), texts, st.text(max_size=40))
    if kind in ("step", "blob step"):
        # A blob step's content is stored as a blob: its row refers to it, and the
        # blob (changed too, at times) is read with it as the row's last column.
        content = "x" * BLOB_MIN if kind == "blob step" else ""
        params = step_params("run-1", 1, _record(draw(st.integers(1, 5)), content))
        row = [params[name] for name in _STEP_ORDER]
        if kind == "blob step":
            row.append(json.dumps({key: body.hex() for key, body in params["blobs"]}))
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(row) - 1))
            value = row[at]
            if isinstance(value, str) and value and draw(st.booleans()):
                i = draw(st.integers(0, len(value) - 1))
                row[at] = (
                    value[:i] + draw(st.sampled_from([*_NASTY_CHARS, "x", "{"])) + value[i + 1 :]
                )
            else:
                row[at] = draw(column_values)
        return kind, tuple(row)
    size = {"run": 18, "note": 6, "effect": 11, "task": 5}[kind]
    return kind, tuple(draw(st.lists(column_values, min_size=size, max_size=size)))


_READERS: dict[str, Callable[[Any], Any]] = {
    "step": step_record,
    "blob step": lambda row: step_record(row[:-1], _blobs(row[-1])),
    "run": run_row,
    "note": lambda row: note_records([row]),
    "effect": effect_row,
    "task": task_record,
}


def _blobs(column: Any) -> dict[str, Any]:
    """The blobs a blob step's last column holds (hex, by digest); anything else is none."""
    try:
        blobs = json.loads(column)
        return {key: bytes.fromhex(body) for key, body in blobs.items()}
    except (TypeError, ValueError, AttributeError):
        return {}


def check_journal_row(case: tuple[str, tuple[Any, ...]]) -> str:
    """A row reads back as the record it was written as, or is a JournalError."""
    kind, row = case
    try:
        _READERS[kind](row)
    except JournalError:
        return f"{kind} refused"
    except Exception as exc:
        raise Crash(f"reading a {kind} row raised {type(exc).__name__}: {exc}") from exc
    return f"{kind} read"


@st.composite
def journal_flips(draw: st.DrawFn, size: int) -> list[tuple[int, int]]:
    """Byte flips of a journal file of ``size`` bytes: (offset, xor mask)."""
    return draw(
        st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), min_size=1, max_size=4)
    )


async def check_journal_file(base: bytes, flips: list[tuple[int, int]], path: Path) -> str:
    """
    Open a copy of a journal with bytes flipped and read everything in it: the
    journal answers with data or with a JournalError, never anything else.

    Returns:
        ``read`` (it read), ``refused`` (a JournalError) or ``same`` (the flips
        changed nothing a reader sees).
    """
    from proctor.runtime._journal import open_journal

    data = bytearray(base)
    for offset, mask in flips:
        data[offset] ^= mask
    _write(path, bytes(data))
    try:
        async with open_journal(path) as j:
            for run in await j.list_runs():
                await j.steps(run.run_id)
                await j.notes(run.run_id)
                await j.processes(run.run_id)
                await j.get_task(run.task_id)
                await j.spend_totals(run.task_id)
                await j.evidence(task_id=run.task_id)
                await j.effects(run_id=run.run_id)
                await j.snapshot(run.run_id)
    except JournalError:
        return "refused"
    except Exception as exc:
        raise Crash(f"reading a damaged journal raised {type(exc).__name__}: {exc}") from exc
    finally:
        with_sqlite_closed(path)
    return "read"


def _write(path: Path, data: bytes) -> None:
    with_sqlite_closed(path)
    with open(path, "wb") as f:
        f.write(data)


def with_sqlite_closed(path: Path) -> None:
    """Remove a damaged copy and what SQLite left beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        target = Path(f"{path}{suffix}")
        if target.exists():
            os.unlink(target)


def plain_journal(path: Path) -> bytes:
    """The bytes of a journal whose WAL was folded into the file."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()
