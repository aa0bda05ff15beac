"""
The one converter for everything that reaches JSON or the journal.

Proposals are a tagged union whose tag is ``type`` (``action``, ``round``,
``message``, ``complete``, ``claim``), the vocabulary of recorded trajectories.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.preconf.json import make_converter
from cattrs.strategies import configure_tagged_union

from proctor._errors import JournalError, TrajectoryError
from proctor.runtime._records import (
    ActionEvent,
    ActionResult,
    Claim,
    ClaimEvent,
    Completion,
    Message,
    MessageEvent,
    MessageKind,
    Proposal,
    RefusedEvent,
    Round,
    SignalEvent,
    ToolCall,
    TrajectoryEvent,
    UserEvent,
    VerdictEvent,
)

__all__ = (
    "EVENT_KEYS",
    "PROPOSAL_TAGS",
    "at_line",
    "check_keys",
    "choice",
    "converter",
    "dumps",
    "event_from_json",
    "event_to_json",
    "step_event",
    "step_round",
    "expect_bool",
    "expect_int",
    "expect_number",
    "expect_str",
    "expect_strings",
    "loads",
    "need",
    "to_jsonable",
)

T = TypeVar("T")

PROPOSAL_TAGS: dict[type, str] = {
    ToolCall: "action",
    Round: "round",
    Message: "message",
    Completion: "complete",
    Claim: "claim",
}

converter = make_converter(forbid_extra_keys=True)


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def expect_str(value: Any, where: str = "the value") -> str:
    """
    Return ``value`` if it is a JSON string.

    The one strict check of JSON from agents, files and the journal: nothing is
    coerced ("3" is no number, 1.5 no whole number, true no number, a string no
    list of strings). Each ``expect_*`` raises ``TypeError("<where> must be ...,
    got <the value as JSON>")``; callers add where it was (a line, a field).

    Raises:
        TypeError: it is not.
    """
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a string, got {_show(value)}")
    return value


def expect_int(value: Any, where: str = "the value") -> int:
    """Return ``value`` if it is a whole JSON number (not a boolean); see :func:`expect_str`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be a whole number, got {_show(value)}")
    return value


def expect_number(value: Any, where: str = "the value") -> float:
    """Return ``value`` as a float if it is a JSON number, not a boolean; see :func:`expect_str`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where} must be a number, got {_show(value)}")
    return float(value)


def expect_bool(value: Any, where: str = "the value") -> bool:
    """Return ``value`` if it is true or false; see :func:`expect_str`."""
    if not isinstance(value, bool):
        raise TypeError(f"{where} must be true or false, got {_show(value)}")
    return value


def expect_strings(value: Any, where: str = "the value") -> tuple[str, ...]:
    """Return ``value`` as a tuple if it is a JSON list of strings; see :func:`expect_str`."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{where} must be a list of strings, got {_show(value)}")
    return tuple(value)


_EXPECT: dict[type, Any] = {
    str: expect_str,
    int: expect_int,
    float: expect_number,
    bool: expect_bool,
}


def _strict(kind: type) -> Any:
    check = _EXPECT[kind]

    def structure(value: Any, cls: Any) -> Any:
        if cls is not kind and isinstance(cls, type) and issubclass(cls, enum.Enum):
            return cls(value)  # an enum whose values are strings or numbers
        return check(value)

    return structure


# JSON from agents and files is checked, not coerced.
converter.register_structure_hook(str, _strict(str))
converter.register_structure_hook(int, _strict(int))
converter.register_structure_hook(float, _strict(float))
converter.register_structure_hook(bool, _strict(bool))


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    return expect_strings(value)


converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _strings)
configure_tagged_union(
    Proposal,
    converter,
    tag_generator=lambda cls: PROPOSAL_TAGS[cls],
    tag_name="type",
)


def to_jsonable(value: Any, unstructure_as: Any = None) -> Any:
    """
    Turn a record into plain JSON-able data.

    Args:
        value: the record.
        unstructure_as: the declared type, for unions (``Proposal``), so the tag is written.
    """
    return converter.unstructure(value, unstructure_as=unstructure_as)


def dumps(value: Any, unstructure_as: Any = None) -> str:
    """Serialize a record to compact JSON."""
    return json.dumps(to_jsonable(value, unstructure_as), separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes, cls: type[T] | Any) -> T:
    """
    Parse JSON into a record of ``cls``.

    Raises:
        cattrs.BaseValidationError: the data does not fit ``cls``.
    """
    result: T = converter.structure(json.loads(text), cls)
    return result


# -- trajectory events ----------------------------------------------------------------

#: The keys each event type accepts, in the order they are written.
EVENT_KEYS: dict[str, tuple[str, ...]] = {
    "action": ("type", "tool", "args", "result", "round", "poll", "changed", "candidate"),
    "message": ("type", "kind", "text", "sources", "blockers"),
    "verdict": ("type", "check", "passed", "of_event", "output"),
    "signal": ("type", "name"),
    "user": ("type", "text"),
    "claim": ("type", "status", "condition", "evidence", "reason"),
    "refused": ("type", "reason"),
}
_RESULT_KEYS = ("status", "exit_code", "output")
_RESULT_STATUSES = ("ok", "error", "timeout")
_SIGNALS = ("user_stop", "stop_signal", "deadline")
# Keys written only when they differ from their default, so that a trajectory
# says no more than it must (and events journaled before a key existed read the same).
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "action": ("round", "poll", "changed", "candidate"),
    "verdict": ("of_event",),
}


def _fail(line: int | None, message: str) -> TrajectoryError:
    return TrajectoryError(message, line=line)


def check_keys(obj: Mapping[str, Any], allowed: Sequence[str], line: int | None, what: str) -> None:
    """Raise :class:`TrajectoryError` at ``line`` for a key of ``obj`` not in ``allowed``."""
    for key in obj:
        if key not in allowed:
            raise _fail(line, f"unknown key {key!r} in {what}; accepted keys: {', '.join(allowed)}")


def need(obj: Mapping[str, Any], key: str, line: int | None, what: str) -> Any:
    """Return ``obj[key]``, or raise :class:`TrajectoryError` at ``line`` naming the key."""
    if key not in obj:
        raise _fail(line, f"{what} needs the key {key!r}")
    return obj[key]


def at_line(check: Any, value: Any, line: int | None, where: str) -> Any:
    """Run one ``expect_*`` check, its ``TypeError`` raised as a :class:`TrajectoryError`."""
    try:
        return check(value, where)
    except TypeError as exc:
        raise _fail(line, str(exc)) from None


def choice(value: Any, options: Sequence[str], line: int | None, where: str) -> str:
    """Return ``value`` if it is one of ``options``; raise :class:`TrajectoryError` otherwise."""
    if value not in options:
        raise _fail(line, f"{where} must be one of {', '.join(options)}, got {_show(value)}")
    return str(value)


def _action(obj: Mapping[str, Any], line: int | None, what: str) -> ActionEvent:
    tool = at_line(expect_str, need(obj, "tool", line, what), line, "tool")
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise _fail(line, "args must be a JSON object")
    result = need(obj, "result", line, what)
    if not isinstance(result, dict):
        raise _fail(line, "result must be a JSON object")
    check_keys(result, _RESULT_KEYS, line, "result")
    status = choice(need(result, "status", line, "result"), _RESULT_STATUSES, line, "result.status")
    code = result.get("exit_code")
    if code is not None:
        at_line(expect_int, code, line, "result.exit_code")
    output = at_line(expect_str, result.get("output", ""), line, "result.output")
    rnd = obj.get("round")
    if rnd is not None and (isinstance(rnd, bool) or not isinstance(rnd, int | str)):
        raise _fail(line, f"round must be a number or a string, got {_show(rnd)}")
    poll = at_line(expect_bool, obj.get("poll", False), line, "poll")
    changed = at_line(expect_bool, obj.get("changed", False), line, "changed")
    candidate = obj.get("candidate")
    if "candidate" in obj and not at_line(expect_str, candidate, line, "candidate"):
        raise _fail(line, "candidate must be a workspace digest, not an empty string")
    return ActionEvent(
        tool=tool,
        args=args,
        result=ActionResult(
            status=status,  # type: ignore[arg-type]  # one of _RESULT_STATUSES
            exit_code=code,
            output=output,
        ),
        round=rnd,
        poll=poll,
        changed=changed,
        candidate=candidate,
    )


def _verdict(
    obj: Mapping[str, Any], line: int | None, what: str, index: int | None
) -> VerdictEvent:
    check = at_line(expect_str, need(obj, "check", line, what), line, "check")
    passed = at_line(expect_bool, need(obj, "passed", line, what), line, "passed")
    of_event = obj.get("of_event")
    if of_event is not None:
        at_line(expect_int, of_event, line, "of_event")
        if index is not None and not 0 <= of_event < index:
            raise _fail(
                line,
                f"of_event {of_event} must name an earlier event "
                f"(0 to {index - 1}; 0 is the start)",
            )
    output = at_line(expect_str, obj.get("output", ""), line, "output")
    return VerdictEvent(check=check, passed=passed, of_event=of_event, output=output)


def event_from_json(obj: Any, line: int | None = None, index: int | None = None) -> TrajectoryEvent:
    """
    Validate one trajectory event's JSON object and return it as a record.

    The one reader of events: trajectory files, journaled steps and imported
    transcripts all come through here.

    Args:
        obj: the parsed JSON.
        line: the line it was read from, for error messages (None: not from a file).
        index: the event's number in its trajectory, so that ``of_event`` can be
            checked to name an earlier event; None skips that check.

    Raises:
        TrajectoryError: it is not a valid event; the message says what was expected.
    """
    if not isinstance(obj, dict):
        raise _fail(line, "an event must be a JSON object")
    kind = choice(need(obj, "type", line, "an event"), tuple(EVENT_KEYS), line, "type")
    what = f"an {kind} event" if kind == "action" else f"a {kind} event"
    check_keys(obj, EVENT_KEYS[kind], line, what)
    if kind == "action":
        return _action(obj, line, what)
    if kind == "verdict":
        return _verdict(obj, line, what, index)
    if kind == "message":
        kinds = [k.value for k in MessageKind]
        named = choice(need(obj, "kind", line, what), kinds, line, "message kind")
        return MessageEvent(
            kind=MessageKind(named),
            text=at_line(expect_str, obj.get("text", ""), line, "text"),
            sources=at_line(expect_strings, obj.get("sources", []), line, "sources"),
            blockers=at_line(expect_strings, obj.get("blockers", []), line, "blockers"),
        )
    if kind == "signal":
        name = choice(need(obj, "name", line, what), _SIGNALS, line, "signal name")
        return SignalEvent(name=name)  # type: ignore[arg-type]  # one of _SIGNALS
    if kind == "user":
        return UserEvent(text=at_line(expect_str, obj.get("text", ""), line, "text"))
    if kind == "refused":
        return RefusedEvent(reason=at_line(expect_str, obj.get("reason", ""), line, "reason"))
    status = choice(need(obj, "status", line, what), ("blocked", "needs_input"), line, "status")
    return ClaimEvent(
        status=status,  # type: ignore[arg-type]  # blocked or needs_input
        condition=at_line(expect_str, obj.get("condition", ""), line, "condition"),
        evidence=at_line(expect_strings, obj.get("evidence", []), line, "evidence"),
        reason=at_line(expect_str, obj.get("reason", ""), line, "reason"),
    )


def event_to_json(event: TrajectoryEvent) -> dict[str, Any]:
    """
    Return an event as the trajectory format's JSON object.

    Keys come in the format's order; an action's ``round``, ``poll``, ``changed``
    and ``candidate`` and a verdict's ``of_event`` are left out at their defaults.
    """
    out: dict[str, Any] = {}
    optional = _OPTIONAL.get(event.type, ())
    defaults = {a.name: a.default for a in attrs.fields(type(event))}
    for key in EVENT_KEYS[event.type]:
        value = getattr(event, key)
        if key in optional and value == defaults[key]:
            continue
        if isinstance(value, ActionResult):
            value = {"status": value.status, "exit_code": value.exit_code, "output": value.output}
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        out[key] = value
    return out


def step_event(step: Mapping[str, Any]) -> TrajectoryEvent | None:
    """
    Return the trajectory event of a journaled step (a row of ``JournalLike.steps``).

    None for a step that has none (a crash, a refusal after the end).

    Raises:
        JournalError: the journaled event is not a valid event.
    """
    data = step.get("event")
    if not data:
        return None
    try:
        return event_from_json(data)
    except TrajectoryError as exc:
        raise JournalError(
            f"run {step.get('run_id', '?')}, step {step.get('step', '?')}: the journaled "
            f"event is not a trajectory event ({exc})"
        ) from None


def step_round(step: Mapping[str, Any]) -> int | str | None:
    """The parallel round a journaled step belongs to, if any."""
    event = step.get("event")
    return event.get("round") if isinstance(event, dict) else None


for _event_class in (
    ActionEvent,
    MessageEvent,
    VerdictEvent,
    SignalEvent,
    UserEvent,
    ClaimEvent,
    RefusedEvent,
):
    converter.register_unstructure_hook(_event_class, event_to_json)
converter.register_structure_hook_func(
    lambda t: t == TrajectoryEvent or t == TrajectoryEvent | None,
    lambda value, _: None if value is None else event_from_json(value),
)


# Re-exported for callers that format validation errors.
BaseValidationError = cattrs.BaseValidationError
