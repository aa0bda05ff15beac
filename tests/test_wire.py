from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor import _wire
from proctor._errors import JournalError, TrajectoryError
from proctor._wire import (
    EVENT_KEYS,
    PROPOSAL_TAGS,
    converter,
    dumps,
    event_from_json,
    event_to_json,
    loads,
    step_event,
    to_jsonable,
)
from proctor.runtime._records import (
    ActionEvent,
    ActionResult,
    Claim,
    ClaimEvent,
    Completion,
    Decision,
    Disposition,
    Message,
    MessageEvent,
    MessageKind,
    Observation,
    ObservationKind,
    Proposal,
    RefusedEvent,
    Round,
    SignalEvent,
    StopReason,
    ToolCall,
    ToolResult,
    ToolStatus,
    TraceRecord,
    TrajectoryEvent,
    UserEvent,
    VerdictEvent,
)

T = TypeVar("T")
# The union as a value: mypy cannot take a union where converter.structure wants a type.
PROPOSAL: Any = Proposal


def test_all_names_exist() -> None:
    assert isinstance(_wire.__all__, tuple)
    for name in _wire.__all__:
        assert hasattr(_wire, name), name
    for name in ("dumps", "loads", "to_jsonable"):
        assert getattr(_wire, name).__doc__, name


# -- strategies ------------------------------------------------------------------------------

# JSON numbers: no NaN (it is not equal to itself) and no infinities (not JSON).
_floats = st.floats(allow_nan=False, allow_infinity=False)
_json_scalars = st.none() | st.booleans() | st.integers() | _floats | st.text()
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_json_objects = st.dictionaries(st.text(), _json, max_size=4)
_texts = st.text(max_size=20)
_optional_floats = st.none() | _floats

tool_calls = st.builds(ToolCall, tool=_texts, args=_json_objects, poll=st.booleans())
rounds = st.builds(Round, calls=st.lists(tool_calls, max_size=3).map(tuple))
messages = st.builds(
    Message,
    kind=st.sampled_from(MessageKind),
    text=_texts,
    sources=st.lists(_texts, max_size=3).map(tuple),
    blockers=st.lists(_texts, max_size=3).map(tuple),
)
completions = st.builds(Completion, summary=_texts)
claims = st.builds(
    Claim,
    status=st.sampled_from(["blocked", "needs_input"]),
    condition=_texts,
    evidence=st.lists(_texts, max_size=3).map(tuple),
    reason=_texts,
)
proposals: st.SearchStrategy[Proposal] = tool_calls | rounds | messages | completions | claims
tool_results = st.builds(
    ToolResult,
    status=st.sampled_from(ToolStatus),
    output=_texts,
    exit_code=st.none() | st.integers(-255, 255),
    duration=_floats,
)
stop_reasons = st.builds(
    StopReason,
    code=_texts,
    message=_texts,
    owner=st.sampled_from(["none", "actor", "operator", "user"]),
    evidence=st.lists(_texts, max_size=3).map(tuple),
    limit=st.none() | _texts,
    value=_optional_floats,
    bound=_optional_floats,
    scope=st.none() | st.sampled_from(["task", "run"]),
)
_remaining = st.dictionaries(_texts, _floats, max_size=4)
observations = st.builds(
    Observation,
    step=st.integers(0, 10**6),
    kind=st.sampled_from(ObservationKind),
    text=_texts,
    results=st.lists(tool_results, max_size=3).map(tuple),
    remaining=_remaining,
    disposition=st.none() | st.sampled_from(Disposition),
)
_text = st.text(max_size=20)
_args = st.dictionaries(
    st.text(max_size=8), st.one_of(st.none(), st.booleans(), st.integers(), _text), max_size=3
)
_results = st.builds(
    ActionResult,
    status=st.sampled_from(["ok", "error", "timeout"]),
    exit_code=st.one_of(st.none(), st.integers(-(2**31), 2**31)),
    output=_text,
)
EVENTS: st.SearchStrategy[TrajectoryEvent] = st.one_of(
    st.builds(
        ActionEvent,
        tool=_text,
        args=_args,
        result=_results,
        round=st.one_of(st.none(), st.integers(0, 99), _text),
        poll=st.booleans(),
        changed=st.booleans(),
        candidate=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
    ),
    st.builds(
        MessageEvent,
        kind=st.sampled_from(MessageKind),
        text=_text,
        sources=st.tuples(_text),
        blockers=st.tuples(),
    ),
    st.builds(
        VerdictEvent,
        check=_text,
        passed=st.booleans(),
        of_event=st.one_of(st.none(), st.integers(0, 5)),
        output=_text,
    ),
    st.builds(SignalEvent, name=st.sampled_from(["user_stop", "stop_signal", "deadline"])),
    st.builds(UserEvent, text=_text),
    st.builds(
        ClaimEvent,
        status=st.sampled_from(["blocked", "needs_input"]),
        condition=_text,
        evidence=st.tuples(_text, _text),
        reason=_text,
    ),
    st.builds(RefusedEvent, reason=_text),
)


trace_records = st.builds(
    TraceRecord,
    trace_id=_texts,
    run_id=_texts,
    step=st.integers(1, 10**6),
    kind=st.sampled_from(["action", "message", "verdict", "claim", "completion", "ended"]),
    action=st.none() | _texts,
    tool_status=st.none() | st.sampled_from(ToolStatus),
    result_fingerprint=st.none() | _texts,
    state_version=st.integers(0, 10**6),
    state_delta=_json_objects,
    remaining=_remaining,
    decision=st.sampled_from(Decision),
    progress=st.booleans(),
    reason=_texts,
    stop_reason=st.none() | stop_reasons,
    disposition=st.none() | st.sampled_from(Disposition),
    policy_version=_texts,
    at=_floats,
    event=st.none() | EVENTS,
)


def round_trip(value: Any, cls: Any) -> Any:
    """Unstructure, go through JSON text, and structure back."""
    text = json.dumps(converter.unstructure(value, unstructure_as=cls))
    return converter.structure(json.loads(text), cls)


# -- round trips --------------------------------------------------------------------------------


@given(proposals)
def test_proposal_round_trip(proposal: Proposal) -> None:
    assert round_trip(proposal, Proposal) == proposal


@given(proposals)
def test_proposal_round_trip_through_dumps_and_loads(proposal: Proposal) -> None:
    text = dumps(proposal, unstructure_as=Proposal)
    assert json.loads(text)["type"] == PROPOSAL_TAGS[type(proposal)]
    assert loads(text, Proposal) == proposal


@given(tool_calls)
def test_tool_call_round_trip(call: ToolCall) -> None:
    assert round_trip(call, ToolCall) == call


@given(rounds)
def test_round_round_trip(value: Round) -> None:
    assert round_trip(value, Round) == value


@given(tool_results)
def test_tool_result_round_trip(result: ToolResult) -> None:
    assert round_trip(result, ToolResult) == result


@given(stop_reasons)
def test_stop_reason_round_trip(reason: StopReason) -> None:
    assert round_trip(reason, StopReason) == reason


@given(observations)
def test_observation_round_trip(observation: Observation) -> None:
    assert round_trip(observation, Observation) == observation


@given(trace_records)
def test_trace_record_round_trip(record: TraceRecord) -> None:
    assert round_trip(record, TraceRecord) == record
    assert loads(dumps(record), TraceRecord) == record


# -- the tag -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proposal", "tag"),
    [
        (ToolCall("read_file", {"path": "a"}), "action"),
        (Round((ToolCall("a"), ToolCall("b"))), "round"),
        (Message(MessageKind.CHECKPOINT, "x"), "message"),
        (Completion("done"), "complete"),
        (Claim("blocked", "no key"), "claim"),
    ],
)
def test_proposals_are_tagged_by_type(proposal: Proposal, tag: str) -> None:
    data = to_jsonable(proposal, unstructure_as=Proposal)
    assert data["type"] == tag
    assert "kind" not in data or isinstance(proposal, Message)


def test_the_tags_are_the_trajectory_vocabulary() -> None:
    expected = {
        ToolCall: "action",
        Round: "round",
        Message: "message",
        Completion: "complete",
        Claim: "claim",
    }
    assert dict(PROPOSAL_TAGS) == expected


def test_a_tool_call_is_written_in_full() -> None:
    assert json.loads(dumps(ToolCall("run_command", {"argv": ["ls"]}), Proposal)) == {
        "type": "action",
        "tool": "run_command",
        "args": {"argv": ["ls"]},
        "poll": False,
    }


def test_calls_inside_a_round_carry_no_tag() -> None:
    data = to_jsonable(Round((ToolCall("a"),)), unstructure_as=Proposal)
    assert data == {"type": "round", "calls": [{"tool": "a", "args": {}, "poll": False}]}


def test_without_unstructure_as_the_tag_is_not_written() -> None:
    assert "type" not in to_jsonable(Completion("done"))


def test_enums_are_written_as_their_values() -> None:
    data = to_jsonable(Observation(3, ObservationKind.VERDICT, disposition=Disposition.PARTIAL))
    assert data["kind"] == "verdict"
    assert data["disposition"] == "partial"


def test_dumps_is_compact_and_keeps_unicode() -> None:
    text = dumps(Completion("fertig ✓"), Proposal)
    assert text == '{"summary":"fertig ✓","type":"complete"}'


# -- refusals ---------------------------------------------------------------------------------


def _refuses(data: Any, cls: Any) -> cattrs.BaseValidationError:
    with pytest.raises(cattrs.BaseValidationError) as info:
        converter.structure(data, cls)
    return info.value


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"type": "complete", "summary": "", "extra": 1}, Proposal),
        ({"type": "action", "tool": "a", "tol": "b"}, Proposal),
        ({"type": "round", "calls": [{"tool": "a", "type": "action"}]}, Proposal),
        ({"status": "ok", "stdout": ""}, ToolResult),
        ({"code": "stall", "reasons": []}, StopReason),
        ({"step": 1, "kind": "start", "extra": None}, Observation),
        (
            {"step": 1, "kind": "result", "results": [{"status": "ok", "extra": 1}]},
            Observation,
        ),
    ],
)
def test_unknown_keys_are_refused(data: dict[str, Any], cls: Any) -> None:
    messages = cattrs.transform_error(_refuses(data, cls))
    assert any("extra fields found" in m for m in messages), messages


@given(trace_records)
def test_an_extra_key_in_a_trace_record_is_refused(record: TraceRecord) -> None:
    data = to_jsonable(record)
    data["unexpected"] = 1
    _refuses(data, TraceRecord)


def test_an_unknown_tag_is_refused() -> None:
    with pytest.raises((cattrs.BaseValidationError, KeyError)):
        converter.structure({"type": "shout", "text": "hi"}, PROPOSAL)


def test_a_missing_tag_is_refused() -> None:
    with pytest.raises((cattrs.BaseValidationError, KeyError)):
        converter.structure({"tool": "read_file"}, PROPOSAL)


def test_a_bad_enum_value_is_refused() -> None:
    _refuses({"status": "maybe"}, ToolResult)


def test_a_bad_literal_is_refused() -> None:
    _refuses({"type": "claim", "status": "stuck"}, Proposal)


@pytest.mark.parametrize("sources", ["https://x.org", ["https://x.org", 3]])
def test_a_string_is_not_a_list_of_sources(sources: Any) -> None:
    error = _refuses({"type": "message", "kind": "final_answer", "sources": sources}, Proposal)
    assert cattrs.transform_error(error) == ["invalid value for type, expected tuple @ $.sources"]


# -- trajectory events -----------------------------------------------------------------


@given(EVENTS)
def test_an_event_round_trips_through_its_json(event: TrajectoryEvent) -> None:
    data = event_to_json(event)
    assert next(iter(data)) == "type"
    assert list(data) == [k for k in EVENT_KEYS[event.type] if k in data]
    # What a file or the journal holds is JSON text: the record survives it.
    assert event_from_json(json.loads(json.dumps(data))) == event


@given(EVENTS)
def test_a_trace_record_carries_its_event_through_the_converter(event: TrajectoryEvent) -> None:
    record = TraceRecord(
        trace_id="t",
        run_id="r",
        step=1,
        kind=event.type,
        action=None,
        tool_status=None,
        result_fingerprint=None,
        state_version=0,
        state_delta={},
        remaining={},
        decision=Decision.CONTINUE,
        progress=False,
        reason="",
        stop_reason=None,
        disposition=None,
        policy_version="p",
        at=0.0,
        event=event,
    )
    data = to_jsonable(record)
    assert data["event"] == event_to_json(event)
    assert converter.structure(data, TraceRecord) == record


def test_defaults_are_left_out_as_the_format_writes_them() -> None:
    event = ActionEvent(tool="run_command", args={"cmd": "true"}, result=ActionResult(status="ok"))
    assert event_to_json(event) == {
        "type": "action",
        "tool": "run_command",
        "args": {"cmd": "true"},
        "result": {"status": "ok", "exit_code": None, "output": ""},
    }
    assert event_to_json(VerdictEvent(check="t", passed=True)) == {
        "type": "verdict",
        "check": "t",
        "passed": True,
        "output": "",
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "an event must be a JSON object"),
        ({"type": "nap"}, "type must be one of action, message"),
        ({"type": "action", "tool": "x"}, "an action event needs the key 'result'"),
        ({"type": "action", "tool": "x", "result": {"status": "fine"}}, "result.status must be"),
        ({"type": "message", "kind": "final_answer", "text": 3}, "text must be a string"),
        ({"type": "verdict", "check": "t", "passed": "yes"}, "passed must be true or false"),
        ({"type": "signal", "name": "sigkill"}, "signal name must be one of"),
        ({"type": "user", "text": "hi", "extra": 1}, "unknown key 'extra' in a user event"),
        ({"type": "claim", "status": "done"}, "status must be one of blocked, needs_input"),
    ],
)
def test_a_bad_event_is_refused_with_what_was_expected(data: Any, expected: str) -> None:
    with pytest.raises(TrajectoryError, match=expected) as caught:
        event_from_json(data, line=7)
    assert caught.value.line == 7


def test_a_bad_journaled_event_names_its_run_and_step() -> None:
    with pytest.raises(JournalError, match="run r1, step 4: the journaled event"):
        step_event({"run_id": "r1", "step": 4, "event": {"type": "complete"}})
    assert step_event({"run_id": "r1", "step": 5, "event": None}) is None
