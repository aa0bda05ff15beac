"""
Recorded trajectories (format v1) and their offline replay.

A trajectory is what an agent did, step by step, with what the world answered.
:func:`replay` feeds it to the same decision core live runs use
(:class:`~proctor.runtime._progress.judge.Judge`) and reports what the controller would
have decided. The format is a public contract: see ``docs/trajectory.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import attrs

from proctor._boundary import loads_strict
from proctor._digest import digest
from proctor._errors import ConfigError, InputRefused, TrajectoryError
from proctor._wire import (
    at_line,
    check_keys,
    choice,
    event_from_json,
    expect_strings,
    need,
)
from proctor.runtime._progress.judge import (
    Act,
    Judge,
    Refused,
    Ruling,
    TaskFacts,
    Verdict,
    missing_files,
)
from proctor.runtime._progress.normalize import normalize_path
from proctor.runtime._progress.policy import Policy
from proctor.runtime._records import (
    ActionEvent,
    Claim,
    ClaimEvent,
    Decision,
    Message,
    MessageEvent,
    RefusedEvent,
    SignalEvent,
    ToolCall,
    ToolResult,
    ToolStatus,
    TrajectoryEvent,
    UserEvent,
    VerdictEvent,
)

__all__ = (
    "FORMAT",
    "VERSION",
    "Candidates",
    "Event",
    "FileModel",
    "Header",
    "Replay",
    "Step",
    "Trajectory",
    "diff_replays",
    "drive",
    "explain",
    "parse_trajectory",
    "read_trajectory",
    "replay",
)

FORMAT = "proctor.trajectory"
VERSION = 1

_MASK = (1 << 128) - 1

_STATUS = {"ok": ToolStatus.OK, "error": ToolStatus.ERROR, "timeout": ToolStatus.UNCERTAIN}
_HEADER_KEYS = ("format", "version", "task", "policy")
_TASK_KEYS = ("kind", "checks", "required_files", "protected")


@attrs.frozen
class Header:
    """A trajectory's first line: the task and the policy overrides."""

    task: TaskFacts
    policy: Policy
    policy_overrides: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Event:
    """
    One event of a trajectory, validated, with its place.

    Args:
        index: 1-based event number (line number minus one).
        body: the event itself.
    """

    index: int
    body: TrajectoryEvent

    @property
    def type(self) -> str:
        """action, message, verdict, signal, user, claim or refused."""
        return self.body.type

    @property
    def line(self) -> int:
        """The event's line in the file."""
        return self.index + 1


@attrs.frozen
class Trajectory:
    """A parsed, validated trajectory."""

    header: Header
    events: tuple[Event, ...]


@attrs.frozen
class Step:
    """The controller's decision at one processed event."""

    index: int
    decision: Decision
    progress: bool
    reason: str = ""


@attrs.frozen
class Replay:
    """
    The outcome of replaying a trajectory.

    ``disposition`` is a terminal disposition, or ``open`` when the trajectory
    ended before the controller stopped it.
    """

    disposition: str
    stop_reason: str | None
    stopped_at: int | None
    events: int
    policy_version: str
    steps: tuple[Step, ...]
    message: str = ""
    #: For a stop: the rule that fired, the events it counted, what would have reset it.
    explanation: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the ``proctor replay --json`` document."""
        return {
            "disposition": self.disposition,
            "stop_reason": self.stop_reason,
            "stopped_at": self.stopped_at,
            "events": self.events,
            "policy_version": self.policy_version,
            "steps": [
                {"index": s.index, "decision": s.decision.value, "progress": s.progress}
                for s in self.steps
            ],
        }


# -- parsing ------------------------------------------------------------------


def _fail(line: int, message: str) -> TrajectoryError:
    return TrajectoryError(message, line=line)


def _strings(value: Any, line: int, where: str) -> tuple[str, ...]:
    return cast(tuple[str, ...], at_line(expect_strings, value, line, where))


def _parse_header(obj: Any, overrides: Mapping[str, Any] | None) -> Header:
    line = 1
    if not isinstance(obj, dict):
        raise _fail(line, "the header must be a JSON object")
    check_keys(obj, _HEADER_KEYS, line, "the header")
    fmt = need(obj, "format", line, "the header")
    if fmt != FORMAT:
        raise _fail(line, f"format must be {FORMAT!r}, got {json.dumps(fmt)}")
    version = need(obj, "version", line, "the header")
    if isinstance(version, bool) or version != VERSION:
        raise _fail(line, f"version {json.dumps(version)} is not supported; this reads version 1")
    task = need(obj, "task", line, "the header")
    if not isinstance(task, dict):
        raise _fail(line, "task must be a JSON object")
    check_keys(task, _TASK_KEYS, line, "task")
    kind = choice(need(task, "kind", line, "task"), ("build", "answer"), line, "task.kind")
    checks = _strings(task.get("checks", []), line, "task.checks")
    required = _strings(task.get("required_files", []), line, "task.required_files")
    protected = _strings(task.get("protected", []), line, "task.protected")
    settings = obj.get("policy", {})
    if not isinstance(settings, dict):
        raise _fail(line, "policy must be a JSON object")
    merged = {**settings, **(overrides or {})}
    try:
        policy = Policy.from_mapping(merged, where="policy")
    except ConfigError as exc:
        raise _fail(line, str(exc)) from None
    facts = TaskFacts(
        kind=cast(Literal["build", "answer"], kind),
        checks=checks,
        protected=tuple(normalize_path(p) for p in protected),
        required_files=required,
    )
    return Header(facts, policy, merged)


def _parse_event(obj: Any, index: int) -> Event:
    return Event(index, event_from_json(obj, index + 1, index))


def parse_trajectory(
    lines: Iterable[str], policy_overrides: Mapping[str, Any] | None = None
) -> Trajectory:
    """
    Parse and validate a trajectory from its lines.

    Args:
        lines: the file's lines (with or without line ends).
        policy_overrides: settings that replace the header's policy.

    Raises:
        TrajectoryError: the input is not a valid v1 trajectory; the message names the line.
    """
    raw = [line.rstrip("\r\n") for line in lines]
    while raw and not raw[-1].strip():
        raw.pop()
    if not raw:
        raise TrajectoryError("the file is empty; line 1 must be the trajectory header", line=1)
    parsed: list[Any] = []
    for number, text in enumerate(raw, start=1):
        if number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            raise _fail(number, "empty line; every line after the header must be one JSON event")
        try:
            parsed.append(loads_strict(text))
        except InputRefused as exc:
            raise _fail(number, str(exc)) from None
    header = _parse_header(parsed[0], policy_overrides)
    events = tuple(_parse_event(obj, index) for index, obj in enumerate(parsed[1:], start=1))
    return Trajectory(header, events)


def read_trajectory(
    path: str | Path, policy_overrides: Mapping[str, Any] | None = None
) -> Trajectory:
    """
    Read and validate a trajectory file.

    Raises:
        TrajectoryError: the file cannot be read or is not a valid v1 trajectory.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TrajectoryError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TrajectoryError(f"{path} is not UTF-8 text ({exc.reason})") from exc
    return parse_trajectory(text.split("\n"), policy_overrides)


# -- the workspace model --------------------------------------------------------


def _entry_hash(path: str, state: str) -> int:
    return int(digest(f"{path}\0{state}"), 16)


@attrs.define(eq=False)
class FileModel:
    """
    What the replay knows of the workspace: the effect of the writes it has seen.

    Files never written are in their (unknown) original state. An edit of a file
    whose content is unknown is kept symbolically, and an edit that undoes the
    previous one cancels it, so an edit/revert returns to the earlier digest.
    The digest is an order-independent sum kept incrementally.
    """

    _files: dict[str, tuple[str | None, tuple[tuple[str, str], ...], str]] = attrs.field(
        factory=dict
    )
    _sum: int = 0
    _seen: set[str] = attrs.field(factory=set)
    _known: dict[str, str] = attrs.field(factory=dict)
    # A digest the trajectory stated (``candidate``) or a state nobody measured
    # (``changed``), and the sum the model had then: later writes are relative to it.
    _base: str | None = None
    _base_sum: int = 0

    @property
    def digest(self) -> str:
        """The candidate digest of the model."""
        if self._base is None:
            return f"{self._sum:032x}"
        if self._sum == self._base_sum:
            return self._base
        return digest(f"{self._base}\0{self._sum:032x}")

    def place(self, candidate: str) -> None:
        """The workspace is now exactly ``candidate`` (a digest the trajectory states)."""
        self._base, self._base_sum = candidate, self._sum

    def touch(self, tag: str) -> None:
        """
        The workspace changed in a way nobody measured: a new state, equal to no
        earlier one (``tag`` makes it unique). What files held at the start is no
        longer known.
        """
        self.place(digest(f"changed\0{tag}\0{self.digest}"))
        self._known.clear()

    def exists(self, path: str) -> bool:
        """Whether the file is known to exist (seen written, edited or read)."""
        entry = self._files.get(path)
        if entry is not None:
            return entry[2] != "deleted"
        return path in self._seen

    def existing(self) -> tuple[str, ...]:
        """The paths known to exist."""
        return tuple(sorted(p for p in set(self._files) | self._seen if self.exists(p)))

    def seen(self, path: str) -> None:
        """Note that a file was seen to exist (a successful read)."""
        self._seen.add(path)

    def _set(
        self, path: str, base: str | None, edits: tuple[tuple[str, str], ...], tag: str
    ) -> None:
        old = self._files.get(path)
        if old is not None:
            self._sum = (self._sum - _entry_hash(path, self._state(old))) & _MASK
        new = (base, edits, tag)
        self._files[path] = new
        self._sum = (self._sum + _entry_hash(path, self._state(new))) & _MASK

    @staticmethod
    def _state(entry: tuple[str | None, tuple[tuple[str, str], ...], str]) -> str:
        base, edits, tag = entry
        return json.dumps([tag, None if base is None else digest(base), list(edits)])

    def _revert(self, path: str) -> None:
        old = self._files.pop(path, None)
        if old is not None:
            self._sum = (self._sum - _entry_hash(path, self._state(old))) & _MASK

    def _content(self, path: str, content: str) -> None:
        """Set a file's content; the content it had at the start means no entry."""
        if self._known.get(path) == content:
            self._revert(path)
        else:
            self._set(path, content, (), "file")

    def apply(self, tool: str, args: Mapping[str, Any], result: ToolResult) -> None:
        """Apply the effect of one action on the model."""
        raw = args.get("path")
        if tool not in ("write_file", "edit_file", "delete_file", "read_file"):
            return
        if not isinstance(raw, str):
            return
        path = normalize_path(raw)
        status = result.status
        entry = self._files.get(path)
        if tool == "read_file":
            if status is ToolStatus.OK:
                self.seen(path)
                if entry is None:
                    # What a file held at the start: a write of the same content
                    # changes nothing. Reads never change the digest.
                    self._known.setdefault(path, result.output)
            return
        if status is ToolStatus.ERROR:
            return
        if status is ToolStatus.UNCERTAIN:
            intended = json.dumps([tool, args.get("content"), args.get("old"), args.get("new")])
            self._set(path, None, (("uncertain", intended),), "uncertain")
            return
        if tool == "write_file":
            content = args.get("content")
            content = content if isinstance(content, str) else json.dumps(content)
            if entry is not None and entry[2] == "file" and entry[0] == content and not entry[1]:
                return
            self._content(path, content)
        elif tool == "delete_file":
            if entry is not None and entry[2] == "deleted":
                return
            self._set(path, None, (), "deleted")
        else:
            old, new = args.get("old"), args.get("new")
            if not isinstance(old, str) or not isinstance(new, str) or old == new:
                return
            base, edits, tag = entry if entry is not None else (None, (), "original")
            if tag in ("deleted", "uncertain"):
                base, edits, tag = None, (), "original"
            if base is None and not edits and tag == "original":
                base = self._known.get(path)
            if base is not None and not edits and old in base:
                self._content(path, base.replace(old, new, 1))
                return
            if edits and edits[-1] == (new, old):
                edits = edits[:-1]
            else:
                edits = (*edits, (old, new))
            if not edits and base is None and tag == "original":
                self._revert(path)
            else:
                self._set(path, base, edits, tag)


# -- replay ---------------------------------------------------------------------


def _call(event: ActionEvent) -> ToolCall:
    return ToolCall(tool=event.tool, args=dict(event.args), poll=event.poll)


def _result(event: ActionEvent) -> ToolResult:
    result = event.result
    return ToolResult(
        status=_STATUS[result.status], output=result.output, exit_code=result.exit_code
    )


def _round(event: Event) -> int | str | None:
    return event.body.round if isinstance(event.body, ActionEvent) else None


def _groups(events: Sequence[Event]) -> list[list[Event]]:
    groups: list[list[Event]] = []
    for event in events:
        rnd = _round(event)
        if rnd is not None and groups and _round(groups[-1][-1]) == rnd:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups


@attrs.frozen
class Candidates:
    """
    Where the candidate digests of a sequence of events come from.

    Args:
        admit: the refusal of an action, or None to let it run.
        apply: applies a call that ran and returns the candidate digest after it.
        judged: the digest a verdict event judged.
        contract: the verification contract a verdict event was bound to; None:
            the decision core's own (a trajectory does not record it, a journal does).
    """

    admit: Callable[[ToolCall, Event], str | None]
    apply: Callable[[ToolCall, ToolResult, Event], str]
    judged: Callable[[Event], str]
    contract: Callable[[Event], str | None] = lambda event: None


def drive(
    judge: Judge, events: Sequence[Event], candidates: Candidates
) -> Iterator[tuple[Event, Ruling]]:
    """
    Feed events to the decision core, one iteration at a time (a parallel round is
    one iteration), and yield each event's ruling. Stops after the ruling that ends
    the run.
    """
    for group in _groups(events):
        rulings: list[Ruling]
        if isinstance(group[0].body, ActionEvent):
            items: list[Act | Refused] = []
            for event in group:
                body = cast(ActionEvent, event.body)  # a round holds actions only
                call = _call(body)
                refusal = candidates.admit(call, event)
                if refusal is not None:
                    items.append(Refused(call, refusal))
                    candidates.apply(call, ToolResult(ToolStatus.REFUSED), event)
                    continue
                result = _result(body)
                before = judge.digest
                after = candidates.apply(call, result, event)
                # A stated digest is exact; ``changed`` alone says only that something moved.
                opaque = body.changed and body.candidate is None
                items.append(Act(call, result, before, after, changed=opaque))
            rulings = judge.round(items)
        else:
            event = group[0]
            rulings = [_decide(judge, event, candidates.judged(event), candidates.contract(event))]
        stopped = False
        for event, ruling in zip(group, rulings, strict=True):
            yield event, ruling
            stopped = stopped or ruling.decision is Decision.STOP
        if stopped:
            return


def replay(trajectory: Trajectory) -> Replay:
    """
    Decide, offline, what the controller would have done with a trajectory.

    Events after the stop are not processed.
    """
    header = trajectory.header
    model = FileModel()
    digests = [model.digest]  # digests[i]: the candidate after event i

    def missing() -> tuple[str, ...]:
        return missing_files(header.task.required_files, model.existing())

    def apply(call: ToolCall, result: ToolResult, event: Event) -> str:
        if result.status is not ToolStatus.REFUSED:
            model.apply(call.tool, call.args, result)
            body = cast(ActionEvent, event.body)
            if body.candidate is not None:
                model.place(body.candidate)
            elif body.changed:
                model.touch(str(event.index))
        digests.append(model.digest)
        return model.digest

    def judged(event: Event) -> str:
        of_event = event.body.of_event if isinstance(event.body, VerdictEvent) else None
        digest = digests[of_event] if of_event is not None else digests[event.index - 1]
        digests.append(model.digest)
        return digest

    judge = Judge(
        task=header.task, policy=header.policy, digest=model.digest, missing_files=missing
    )
    steps: list[Step] = []
    stopped_at: int | None = None
    candidates = Candidates(lambda call, event: judge.admit(call), apply, judged)
    trail = _Trail()
    for event, ruling in drive(judge, trajectory.events, candidates):
        steps.append(Step(event.index, ruling.decision, ruling.progress, ruling.reason))
        trail.note(judge, event, steps[-1])
        if ruling.decision is Decision.STOP:
            stopped_at = event.index
    reason = judge.stop_reason
    return Replay(
        disposition=judge.disposition.value if judge.disposition else "open",
        stop_reason=reason.code if reason else None,
        stopped_at=stopped_at,
        events=len(trajectory.events),
        policy_version=header.policy.version,
        steps=tuple(steps),
        message=reason.message if reason else "",
        explanation=trail.explain(judge, stopped_at) if stopped_at is not None else None,
    )


@attrs.define(eq=False)
class _Trail:
    """What a replay keeps to explain a stop: which events each iteration was."""

    # iteration of the current window -> (its events, the stall count after it)
    iterations: dict[int, tuple[list[int], int]] = attrs.field(factory=dict)
    messages: list[int] = attrs.field(factory=list)
    steps: dict[int, Step] = attrs.field(factory=dict)
    what: dict[int, str] = attrs.field(factory=dict)

    def note(self, judge: Judge, event: Event, step: Step) -> None:
        self.steps[event.index] = step
        self.what[event.index] = _summary(event)
        if event.type == "user":
            self.iterations.clear()
            self.messages.clear()
            return
        if event.type == "message":
            self.messages.append(event.index)
        if event.type == "signal":
            return
        entry = self.iterations.setdefault(judge.iteration, ([], 0))
        entry[0].append(event.index)
        self.iterations[judge.iteration] = (entry[0], judge.stall)

    def _events(self, iterations: Sequence[int]) -> list[dict[str, Any]]:
        out = []
        for number in iterations:
            for index in self.iterations.get(number, ([], 0))[0]:
                out.append(self._item(index) | {"iteration": number})
        return out

    def _item(self, index: int) -> dict[str, Any]:
        step = self.steps[index]
        return {
            "event": index,
            "what": self.what[index],
            "decision": step.decision.value,
            "reason": step.reason,
        }

    def explain(self, judge: Judge, stopped_at: int) -> dict[str, Any]:
        reason = judge.stop_reason
        code = reason.code if reason else ""
        policy = judge.policy
        out: dict[str, Any] = {
            "rule": code,
            "message": reason.message if reason else "",
            "stopped_at": stopped_at,
        }
        if code == "repeated_failure" and reason is not None:
            found = dict(item.split(":", 1) for item in reason.evidence if ":" in item)
            entry = (found.get("candidate", ""), found.get("failure", ""))
            counted = judge.failure_iterations(entry)
            window = policy.failure_window
            out["counted"] = self._events(counted)
            out["threshold"] = policy.stall_threshold
            out["failure_window"] = window
            resets = [
                "a change of the candidate between two occurrences (a write that changes "
                "a file, an action marked `changed`, or another `candidate` digest)",
                "a different failure: another signature (other error lines, another exit "
                "code; for an empty output, another command)",
                "a `user` instruction (a fresh window)",
            ]
            if window and counted:
                first = self._events(counted[:1])
                resets.insert(
                    2,
                    f"more than {window} iterations between the first counted occurrence "
                    f"(event {first[0]['event'] if first else '?'}) and this one: it would "
                    "have left the failure window",
                )
            out["would_reset"] = resets
        elif code == "stall":
            streak: list[int] = []
            for number in sorted(self.iterations, reverse=True):
                stall_after = self.iterations[number][1]
                if stall_after == 0:
                    break
                earlier = self.iterations.get(number - 1, ([], 0))[1]
                if stall_after > earlier:
                    streak.append(number)
            out["counted"] = self._events(sorted(streak)[-policy.stall_threshold :])
            out["threshold"] = policy.stall_threshold
            out["would_reset"] = [
                "an iteration that makes progress: a call with a new (normalized) outcome, "
                "a new candidate digest, a new failure signature, a changed poll outcome, "
                "or a new verdict",
                "a `user` instruction (a fresh window)",
                "infrastructure errors neither count nor reset it",
            ]
        elif code == "identical_responses":
            n = judge.same_responses
            out["counted"] = [self._item(i) for i in self.messages[-n:]]
            out["threshold"] = policy.identical_response_threshold
            out["would_reset"] = [
                "a message with another text (whitespace aside)",
                "an action that makes progress",
                "a `user` instruction (a fresh window)",
            ]
        else:
            out["counted"] = [self._item(stopped_at)]
            out["would_reset"] = []
        return out


def _summary(event: Event, limit: int = 80) -> str:
    """A short description of an event, for a person reading an explanation."""
    body = event.body
    if isinstance(body, ActionEvent):
        args = body.args
        shown = next(
            (args[k] for k in ("cmd", "path", "url", "query") if isinstance(args.get(k), str)),
            None,
        )
        text = f"{body.tool} {shown}" if shown is not None else body.tool
        code = body.result.exit_code
        text += f" -> {body.result.status}" + (f" (exit {code})" if code is not None else "")
    elif isinstance(body, MessageEvent):
        text = f"{body.kind.value}: {' '.join(body.text.split())}"
    elif isinstance(body, VerdictEvent):
        text = f"verdict {body.check}: {'passed' if body.passed else 'failed'}"
    else:
        text = event.type
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain(trajectory: Trajectory) -> dict[str, Any] | None:
    """
    Replay a trajectory and explain its stop: the rule that fired, the events it
    counted, and what would have reset it. None when the controller did not stop.
    """
    return replay(trajectory).explanation


def _decide(judge: Judge, event: Event, judged: str, contract: str | None) -> Ruling:
    body = event.body
    if isinstance(body, MessageEvent):
        return judge.message(
            Message(kind=body.kind, text=body.text, sources=body.sources, blockers=body.blockers)
        )
    if isinstance(body, VerdictEvent):
        return judge.verdict(
            Verdict(
                body.check,
                body.passed,
                judged,
                body.output,
                judge.contract_version if contract is None else contract,
            )
        )
    if isinstance(body, SignalEvent):
        return judge.signal(body.name)
    if isinstance(body, UserEvent):
        return judge.user(body.text)
    if isinstance(body, RefusedEvent):
        return judge.refusal(body.reason or "refused")
    assert isinstance(body, ClaimEvent), body
    return judge.claim(
        Claim(
            status=body.status,
            condition=body.condition,
            evidence=body.evidence,
            reason=body.reason,
        )
    )


def diff_replays(a: Replay, b: Replay) -> list[dict[str, Any]]:
    """
    Return the events where two replays of one trajectory decide differently.

    Each entry has the event index and both decisions (None where one replay had
    already stopped).
    """
    left = {s.index: s for s in a.steps}
    right = {s.index: s for s in b.steps}
    out = []
    for index in sorted(set(left) | set(right)):
        x, y = left.get(index), right.get(index)
        dx = x.decision.value if x else None
        dy = y.decision.value if y else None
        if dx != dy or (x and y and x.progress != y.progress):
            out.append(
                {
                    "index": index,
                    "a": dx,
                    "b": dy,
                    "a_reason": x.reason if x else "",
                    "b_reason": y.reason if y else "",
                }
            )
    return out
