"""
The controller's decision core: a synchronous state machine that turns what
happened at one step into a decision.

Live runs and ``proctor replay`` feed it the same facts, so a recorded
trajectory replays to the decisions a live controller would have made. It does
no I/O: the caller tells it the candidate digest before and after every action
(the live controller from the real workspace, the replay from its model of the
writes it has seen).

Every signal is kept incrementally, at a constant cost per step whatever the
history length.

The whole state can be saved as plain data (:meth:`Judge.snapshot`) and loaded
back (:meth:`Judge.restore`), so that a resumed run need not feed the decision
core every step of its history again: it loads the latest snapshot and is fed
only the steps after it.
"""

from __future__ import annotations

import binascii
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs
import cattrs

from proctor._digest import canonical_json, digest
from proctor._errors import SnapshotRefused
from proctor._wire import converter, to_jsonable
from proctor.runtime._progress.codec import (
    as_bool,
    as_int,
    as_ints,
    as_opt_str,
    as_pairs,
    as_str,
    as_strs,
    hash64,
    pack64,
    unpack64,
)
from proctor.runtime._progress.normalize import (
    Declarations,
    action_key,
    failure_signature,
    fingerprint,
    is_infrastructure_error,
    normalize_output,
    normalize_path,
    normalized_action,
    response_fingerprint,
)
from proctor.runtime._progress.policy import Policy
from proctor.runtime._progress.workset import WorkSet
from proctor.runtime._records import (
    Claim,
    Decision,
    Disposition,
    Message,
    MessageKind,
    StopReason,
    ToolCall,
    ToolResult,
    ToolStatus,
)
from proctor.runtime._tools.spec import ToolSpec
from proctor.verifiers._candidate import matches

__all__ = (
    "SNAPSHOT_FORMAT",
    "Act",
    "Judge",
    "Refused",
    "Ruling",
    "SnapshotRefused",
    "TaskFacts",
    "Verdict",
    "action_key",
    "facts_digest",
    "is_infrastructure_error",
    "missing_files",
    "normalized_action",
)

#: The layout of :meth:`Judge.snapshot`; a snapshot of another layout is refused.
SNAPSHOT_FORMAT = 2

SignalName = Literal["stop_signal", "user_stop", "deadline"]

# How the refuse rung's refusals begin: a refused exact repeat is told from other refusals.
_REPEAT = "repeat: "


@attrs.frozen
class TaskFacts:
    """
    What the decision core needs to know of the task.

    Args:
        kind: ``build`` (judged by checks) or ``answer`` (judged by its grounding).
        checks: names of the checks that must all pass on one candidate; empty means
            every check with a verdict on that candidate, at least one.
        protected: glob patterns of paths the actor may not write.
        required_files: glob patterns of files the result must contain.
        tools: tool declarations that override the built-in ones.
    """

    kind: Literal["build", "answer"] = "build"
    checks: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    required_files: tuple[str, ...] = ()
    tools: Mapping[str, ToolSpec] = attrs.field(factory=dict)


@attrs.frozen
class Act:
    """
    One action the controller let run, with its outcome.

    Args:
        call: the tool call.
        result: what the tool returned.
        before: the candidate digest before the call.
        after: the candidate digest after it.
        changed: the call may have changed the workspace in a way nobody measured
            (a trajectory's ``changed: true``): ``after`` is then a new state equal
            to no earlier one, which alone is not progress (the call's own outcome
            decides), but it makes earlier evidence stale and same-candidate
            failure counts start again.
    """

    call: ToolCall
    result: ToolResult
    before: str
    after: str
    changed: bool = False


@attrs.frozen
class Refused:
    """An action the controller refused; it never ran."""

    call: ToolCall
    reason: str


@attrs.frozen
class Verdict:
    """
    The external verifier's result for one check on the candidate with ``digest``,
    under the contract with version ``contract`` (evidence under another version is stale).
    """

    check: str
    passed: bool
    digest: str
    output: str = ""
    contract: str = ""


@attrs.frozen
class Ruling:
    """
    The decision for one step.

    Args:
        decision: continue, nudge, refuse or stop.
        progress: whether the step made progress.
        reason: why, for a person (and, for a nudge, for the agent).
        disposition: set when the step ends the run.
        stop_reason: set when the step ends the run.
        delta: what changed in the run state, for the trace.
        result_fingerprint: the normalized result's fingerprint, for actions.
    """

    decision: Decision
    progress: bool
    reason: str = ""
    disposition: Disposition | None = None
    stop_reason: StopReason | None = None
    delta: dict[str, Any] = attrs.field(factory=dict)
    result_fingerprint: str | None = None


def missing_files(required: Sequence[str], present: Iterable[str]) -> tuple[str, ...]:
    """
    Return the required file patterns that no present file matches, in their order.

    Args:
        required: glob patterns of files the result must contain.
        present: the workspace-relative paths of the files there are.
    """
    files = tuple(present)
    return tuple(p for p in required if not any(matches(f, (p,)) for f in files))


def facts_digest(task: TaskFacts) -> str:
    """
    Return a digest of what the decision core knows of the task: a snapshot taken
    under other facts is refused.
    """
    tools = {name: attrs.asdict(spec) for name, spec in sorted(task.tools.items())}
    return digest(
        canonical_json(
            {
                "kind": task.kind,
                "checks": task.checks,
                "protected": task.protected,
                "required_files": task.required_files,
                "tools": tools,
            }
        )
    )


@attrs.define(eq=False)
class _Window:
    """The state a new user instruction starts afresh."""

    work: WorkSet = attrs.field(factory=WorkSet)
    # Candidate digests seen, in the order they were first seen (a dict keeps it).
    seen: dict[str, None] = attrs.field(factory=dict)
    stall: int = 0
    same_response: int = 0
    last_response: str | None = None
    # hash of an action -> (its last output fingerprint, how many times in a row)
    polls: dict[int, tuple[str, int]] = attrs.field(factory=dict)
    # (candidate, failure signature) -> the iterations it occurred at, the latest few
    failures: dict[tuple[str, str], deque[int]] = attrs.field(factory=dict)
    # Iterations decided in this window (a round, a message, a claim, a verdict).
    iteration: int = 0
    tool_streaks: dict[str, int] = attrs.field(factory=dict)
    # hash of an action -> hash of its first outcome while every call since gave that
    # outcome, 0 once one did not. Hashes (64 bits) keep it small: an action's
    # arguments may hold a whole file, and every action the run ever took is here.
    outcomes: dict[int, int] = attrs.field(factory=dict)
    # The actions of the last iteration without progress, each with the failure it gave
    # (None: it did not fail): an exact repeat that is refused would have given it again.
    idle: dict[str, str | None] = attrs.field(factory=dict)
    # (hash of an action, its outcome), the last ten
    shapes: deque[tuple[int, str]] = attrs.field(factory=lambda: deque(maxlen=10))


@attrs.define(eq=False)
class Judge:
    """
    The decision core. Feed it each step's facts; it returns a :class:`Ruling`.

    Args:
        task: what it needs to know of the task.
        policy: thresholds and switches.
        digest: the candidate digest when the run (or replay) starts.
        missing_files: reports which required files are still missing, for rescues.
    """

    task: TaskFacts
    policy: Policy
    digest: str
    missing_files: Callable[[], tuple[str, ...]] = lambda: ()
    contract_version: str = ""
    disposition: Disposition | None = attrs.field(default=None, init=False)
    stop_reason: StopReason | None = attrs.field(default=None, init=False)
    state_version: int = attrs.field(default=0, init=False)
    evidence: dict[tuple[str, str], dict[str, bool]] = attrs.field(factory=dict, init=False)
    actions: int = attrs.field(default=0, init=False)
    _last_failure: dict[str, str] = attrs.field(factory=dict, init=False)
    fetched: set[str] = attrs.field(factory=set, init=False)
    rescues: int = attrs.field(default=0, init=False)
    # Settled once: a policy does not change during a run, and every trace record names it.
    policy_version: str = attrs.field(init=False)
    _rescue_text: str = attrs.field(default="", init=False)
    _window: _Window = attrs.field(factory=_Window, init=False)
    # What the judge derives from the task's declarations and the call at hand: not state.
    _declared: Declarations = attrs.field(factory=Declarations, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._window.seen[self.digest] = None
        self.policy_version = self.policy.version

    # -- queries ------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        """Whether the run has ended."""
        return self.disposition is not None

    @property
    def stall(self) -> int:
        """Consecutive iterations without progress in the current window."""
        return self._window.stall

    @property
    def same_responses(self) -> int:
        """How many identical responses in a row the current window has seen."""
        return self._window.same_response

    @property
    def work_items(self) -> int:
        """How many distinct work items the current window holds."""
        return len(self._window.work)

    @property
    def work_fingerprint(self) -> str:
        """The fingerprint of the distinct work done in the current window."""
        return self._window.work.fingerprint

    def spec(self, tool: str) -> ToolSpec:
        """Return the declaration of ``tool``."""
        return self._declared.spec(self.task.tools, tool)

    def action(self, call: ToolCall) -> str:
        """
        The call's normalized action by the task's declarations (as :func:`action_key`
        has it): the key that repetition and progress are judged by.
        """
        return self._declared.action(self.task.tools, call)

    def recorded_action(self, call: ToolCall) -> str:
        """
        The call's action as its trace record holds it: normalized by the built-in
        declarations (:func:`normalized_action`), which a replay without the task's
        own tools has too.
        """
        return self._declared.recorded_action(self.task.tools, call)

    def protected_path(self, call: ToolCall) -> str | None:
        """Return the protected path an effectful call would write, if any."""
        spec = self.spec(call.tool)
        if not spec.effectful or not self.task.protected:
            return None
        for key in spec.paths:
            value = call.args.get(key)
            if isinstance(value, str) and matches(normalize_path(value), self.task.protected):
                return normalize_path(value)
        return None

    def passing(self, digest: str) -> bool:
        """
        Whether every required check passes for the candidate with ``digest``
        under the current contract version.
        """
        verdicts = self.evidence.get((digest, self.contract_version), {})
        required = self.task.checks or tuple(verdicts)
        return bool(required) and all(verdicts.get(name) is True for name in required)

    # -- admission ----------------------------------------------------------

    def admit(self, call: ToolCall) -> str | None:
        """
        Decide whether a call may run. Returns the reason for refusing it, or None.

        The completion fence comes first: after the run ended, every effectful
        call is refused. Reads after the end are refused too: nothing the actor
        learns can change a terminal disposition.
        """
        # A call is admitted once a step, before anything asks for its action: the
        # action kept is forgotten here, so it holds within one step (an actor may
        # propose the same ToolCall again, its arguments changed).
        self._declared.forget_call()
        if self.disposition is not None:
            return f"fence: the run has ended ({self.disposition.value}); no call may run"
        path = self.protected_path(call)
        if path is not None:
            return f"protected: {path} is protected by the task's contract; it may not be changed"
        threshold = self.policy.stall_threshold
        w = self._window
        # The refuse rung: the next step without progress would be the (T-1)-th (or
        # later) in a row, and this call is the exact repeat of the last one that made
        # none, with the same outcome every time it ran. It is not run.
        if (
            self.policy.refuse_repeats
            and threshold >= 2
            and w.stall + 1 >= threshold - 1
            and (action := self.action(call)) in w.idle
            and w.outcomes.get(hash64(action), 0) != 0
            and not (call.poll and self._poll_allowed(call))
        ):
            return (
                f"{_REPEAT}this exact call made no progress last time and {w.stall} steps in a "
                "row made none; it was not run: try something that can produce new evidence"
            )
        return None

    def _poll_allowed(self, call: ToolCall) -> bool:
        entry = self._window.polls.get(hash64(self.action(call)))
        return entry is None or entry[1] < self.policy.poll_limit

    # -- steps --------------------------------------------------------------

    def observe_candidate(self, digest: str) -> bool:
        """
        Take note of the candidate as it stands when it changed outside the
        controller's own calls (a background process, a person). Returns whether it
        changed.
        """
        if digest == self.digest:
            return False
        self.digest = digest
        self._window.seen[digest] = None
        self.state_version += 1
        return True

    def accept(self) -> Ruling | None:
        """
        Complete a build whose candidate, as it stands, already has passing evidence
        for every required check under the current contract (judged before, by this
        run or an earlier one of the task). None when it has not.
        """
        if self.disposition is not None or self.task.kind != "build":
            return None
        if not self.passing(self.digest):
            return None
        names = sorted(self.evidence[(self.digest, self.contract_version)])
        return self._finish(
            Disposition.COMPLETED,
            "checks_passed",
            f"every required check had passed on candidate {self.digest[:12]}",
            "none",
            evidence=tuple(f"{name}@{self.digest}" for name in names),
        )

    def reopen(self) -> None:
        """
        Continue a task whose run ended (a resume): the disposition is cleared and the
        counters start again, but the distinct work, the candidates seen, the failure
        counts and the evidence stay: what was done before buys no new time.
        """
        self.disposition = None
        self.stop_reason = None
        w = self._window
        w.stall = 0
        w.same_response = 0
        w.last_response = None
        w.polls.clear()
        w.tool_streaks.clear()
        w.idle.clear()
        w.seen[self.digest] = None

    def amend(self, task: TaskFacts, contract_version: str) -> None:
        """An operator changed the contract: evidence under the old version is stale."""
        self.task = task
        self.contract_version = contract_version
        self.state_version += 1

    def round(self, items: Sequence[Act | Refused]) -> list[Ruling]:
        """
        Decide one iteration: one action, or the actions of one parallel round.

        The round makes progress when any of its actions does; it is counted
        once. A stop lands on the round's last item.
        """
        if self.disposition is not None:
            return [self._after_end(item.call) for item in items]
        w = self._window
        w.iteration += 1
        results: list[tuple[bool | None, str, dict[str, Any], str | None, str]] = []
        failures_hit: set[tuple[str, str]] = set()
        ran: dict[str, str | None] = {}
        kept: dict[str, str | None] = {}
        for item in items:
            if isinstance(item, Refused):
                results.append((False, item.reason, {}, None, "refuse"))
                if item.reason.startswith(_REPEAT):
                    action = self.action(item.call)
                    known = kept[action] = w.idle.get(action)
                    if known is not None:
                        # Its outcome is known: it failed the same way every time it ran.
                        self._failure(known, failures_hit)
            else:
                failed: list[str] = []
                results.append((*self._act(item, failures_hit, failed), "act"))
                ran[self.action(item.call)] = failed[0] if failed else None
            self._tool_streak(item.call.tool, results[-1][0])
        values = [r[0] for r in results]
        progress: bool | None
        if any(v is True for v in values):
            progress = True
        elif any(v is False for v in values):
            progress = False
        else:
            progress = None
        self._count(progress)
        if progress:
            w.idle.clear()
            w.same_response = 0
            w.last_response = None
        elif progress is False:
            # What ran without progress, and what was refused as a repeat, may be
            # refused if repeated exactly.
            w.idle = {**kept, **ran}

        stop = self._no_progress_stop(failures_hit)
        # A rescue takes the place of a stop, so it lands where the stop would have,
        # on a refused call too.
        rescue = stop is None and bool(self._rescue_text)
        nudge = None if stop else self._nudge() or self._streak_nudge(items)
        rulings = []
        for index, (p, note, delta, fp, what) in enumerate(results):
            last_item = index == len(results) - 1
            decision = Decision.REFUSE if what == "refuse" else Decision.CONTINUE
            reason = note
            disposition = stop_reason = None
            if last_item and stop is not None:
                disposition, stop_reason = self._end(*stop)
                decision, reason = Decision.STOP, stop_reason.message
            elif last_item and nudge is not None and (rescue or decision is Decision.CONTINUE):
                decision, reason = Decision.NUDGE, nudge
            rulings.append(Ruling(decision, bool(p), reason, disposition, stop_reason, delta, fp))
        return rulings

    def _act(
        self, act: Act, failures_hit: set[tuple[str, str]], failed: list[str]
    ) -> tuple[bool | None, str, dict[str, Any], str | None]:
        # Kept whole: the signals of one action (candidate, outcomes, work, failures, polls,
        # shapes) update one window together, in an order that is part of the policy; apart,
        # each piece would take the same half-dozen locals and hide that order.
        w = self._window
        self.actions += 1
        call, result = act.call, act.result
        spec = self.spec(call.tool)
        key = self.action(call)
        khash = hash64(key)
        fp = fingerprint(result.output)
        delta: dict[str, Any] = {}
        outcome = hash64(f"{result.status.value}:{fp}") or 1
        first = w.outcomes.get(khash)
        # Only a call that always gave the same outcome is predictable enough to refuse.
        w.outcomes[khash] = outcome if first is None or first == outcome else 0
        if act.after != act.before:
            self.digest = act.after
            self.state_version += 1
            delta["candidate"] = act.after
            new_state = act.after not in w.seen
            w.seen[act.after] = None
            if not act.changed:
                w.work.add("state", act.after)
                self._shape(khash, act.after)
                if not new_state:
                    return False, "the candidate returned to an earlier state (a cycle)", delta, fp
                return True, "new candidate", delta, fp
            # A change nobody measured: the evidence and the same-candidate counts of
            # the old candidate no longer apply, but the call's outcome decides progress.

        if is_infrastructure_error(result):
            return (
                None,
                "infrastructure error: not the agent's loop (budget still spent)",
                delta,
                fp,
            )

        if result.status is ToolStatus.OK:
            if spec.source is not None and isinstance(call.args.get(spec.source), str):
                source = str(call.args[spec.source])
                if spec.source == "url":
                    self.fetched.add(source)
                    item: tuple[str, ...] = ("source", source)
                else:
                    item = ("source", f"{spec.source}:{' '.join(source.split())}")
            elif spec.paths and spec.changes_candidate:
                # A write that left every file as it was.
                self._shape(khash, fp)
                return False, "the write changed nothing", delta, fp
            else:
                item = ("tool", key, fp, str(result.exit_code))
            if call.poll:
                return self._poll(key, khash, fp, item, delta)
            new = w.work.add(*item)
            self._shape(khash, fp)
            if new:
                self.state_version += 1
                delta["work"] = len(w.work)
                return True, "new work", delta, fp
            return False, "repeated work: nothing new", delta, fp

        if result.status is ToolStatus.UNCERTAIN:
            new = w.work.add("uncertain", key)
            self._shape(khash, "uncertain")
            return new, "the outcome is uncertain (its effect is unknown)", delta, fp

        signature = failure_signature(result.output, result.exit_code)
        # The same dead end reached by another spelling of a command is one failure.
        fkey = signature if call.tool == "run_command" else f"{call.tool}:{signature}"
        if not normalize_output(result.output).strip():
            # Nothing says which dead end this was (a search that found nothing, a test
            # that was false): the call names it. Another search is other work.
            fkey = f"{fkey}:{digest(key)}"
        failed.append(fkey)
        self._shape(khash, fkey)
        new = w.work.add("failure", fkey)
        self._failure(fkey, failures_hit)
        if new:
            self.state_version += 1
            delta["failure"] = fkey
            return True, "a new failure", delta, fp
        return False, "the same failure again", delta, fp

    def _poll(
        self, key: str, khash: int, fp: str, item: tuple[str, ...], delta: dict[str, Any]
    ) -> tuple[bool | None, str, dict[str, Any], str | None]:
        w = self._window
        last = w.polls.get(khash)
        if last is not None and last[0] == fp:
            streak = last[1] + 1
            w.polls[khash] = (fp, streak)
            if streak <= self.policy.poll_limit:
                return None, f"poll: unchanged outcome ({streak} in a row), waiting", delta, fp
            return False, f"poll: unchanged {streak} times in a row, over its limit", delta, fp
        w.polls[khash] = (fp, 1)
        w.work.add("poll", *item[1:])
        self.state_version += 1
        delta["poll"] = key
        return True, "poll: the outcome changed", delta, fp

    def _tool_streak(self, tool: str, progress: bool | None) -> None:
        streaks = self._window.tool_streaks
        if progress is True:
            streaks.pop(tool, None)
        elif progress is False:
            streaks[tool] = streaks.get(tool, 0) + 1

    def _streak_nudge(self, items: Sequence[Act | Refused]) -> str | None:
        """Name a tool whose calls keep making no progress, whatever came in between."""
        threshold = self.policy.stall_threshold
        if threshold < 2:
            return None
        for item in items:
            streak = self._window.tool_streaks.get(item.call.tool, 0)
            if streak and streak % threshold == 0:
                return (
                    f"the last {streak} calls of {item.call.tool} made no progress, whatever "
                    "came in between; use it for something new or use another tool"
                )
        return None

    def _failure(self, signature: str, hit: set[tuple[str, str]]) -> None:
        self._occurred((self.digest, signature), hit)

    def _occurred(self, entry: tuple[str, str], hit: set[tuple[str, str]]) -> None:
        if entry in hit:  # parallel calls in one round count once
            return
        hit.add(entry)
        w = self._window
        seen = w.failures.get(entry)
        if seen is None:
            # Only the latest ``stall_threshold`` occurrences can make a stop.
            seen = w.failures[entry] = deque(maxlen=max(self.policy.stall_threshold, 1))
        seen.append(w.iteration)

    def failure_count(self, entry: tuple[str, str]) -> int:
        """How many times a (candidate, failure signature) occurred within the failure window."""
        return len(self.failure_iterations(entry))

    def failure_iterations(self, entry: tuple[str, str]) -> list[int]:
        """
        The iterations of the current window at which a (candidate, failure signature)
        occurred and that still count (the latest ``stall_threshold``, within the
        failure window).
        """
        w = self._window
        seen = w.failures.get(entry, ())
        window = self.policy.failure_window
        if not window:
            return list(seen)
        return [i for i in seen if i > w.iteration - window]

    @property
    def iteration(self) -> int:
        """The iterations decided in the current window (rounds, messages, claims, verdicts)."""
        return self._window.iteration

    def _shape(self, khash: int, outcome: str) -> None:
        self._window.shapes.append((khash, outcome))

    def _count(self, progress: bool | None) -> None:
        if progress is True:
            self._window.stall = 0
        elif progress is False:
            self._window.stall += 1

    def _cycle(self) -> int | None:
        shapes = list(self._window.shapes)
        for period in range(1, 6):
            if len(shapes) >= 2 * period and shapes[-period:] == shapes[-2 * period : -period]:
                return period
        return None

    def _no_progress_stop(self, failures_hit: set[tuple[str, str]]) -> tuple[Any, ...] | None:
        w = self._window
        threshold = self.policy.stall_threshold
        if threshold == 0:
            return None
        for entry in sorted(failures_hit):
            count = self.failure_count(entry)
            if count >= threshold:
                within = (
                    f" within the last {self.policy.failure_window} iterations"
                    if self.policy.failure_window
                    else ""
                )
                return self._maybe_rescue(
                    "repeated_failure",
                    f"the same failure occurred {count} times on one candidate{within}, "
                    "however the command was spelled",
                    evidence=(f"candidate:{entry[0]}", f"failure:{entry[1]}"),
                )
        if w.stall >= threshold:
            cycle = self._cycle()
            shape = f" (a cycle of period {cycle})" if cycle else ""
            return self._maybe_rescue(
                "stall", f"{w.stall} iterations in a row made no progress{shape}"
            )
        return None

    def _maybe_rescue(
        self, code: str, message: str, evidence: tuple[str, ...] = ()
    ) -> tuple[Any, ...] | None:
        missing = self.missing_files() if self.rescues < self.policy.rescue_limit else ()
        if missing:
            self.rescues += 1
            self._window.stall = 0
            self._window.failures.clear()
            self._rescue_text = (
                f"rescue {self.rescues}/{self.policy.rescue_limit}: {message}. Required files "
                f"are still missing: {', '.join(missing)}. Write them now."
            )
            return None
        return ("no_progress", Disposition.NO_PROGRESS, code, message, "actor", evidence)

    def _nudge(self) -> str | None:
        if self._rescue_text:
            text, self._rescue_text = self._rescue_text, ""
            return text
        w = self._window
        threshold = self.policy.stall_threshold
        if threshold >= 3 and w.stall == threshold - 2:
            cycle = self._cycle()
            pattern = f"a cycle of period {cycle}" if cycle else "repeated work"
            return (
                f"{w.stall} steps without progress ({pattern}). The next step should seek new "
                "evidence: a different file, a different hypothesis, or a check not yet run."
            )
        return None

    def _end(self, *stop: Any) -> tuple[Disposition, StopReason]:
        _, disposition, code, message, owner, evidence = stop
        self.disposition = disposition
        self.stop_reason = StopReason(code=code, message=message, owner=owner, evidence=evidence)
        self.state_version += 1
        return disposition, self.stop_reason

    def _finish(
        self, disposition: Disposition, code: str, message: str, owner: str, **extra: Any
    ) -> Ruling:
        self.disposition = disposition
        self.stop_reason = StopReason(code=code, message=message, owner=owner, **extra)
        self.state_version += 1
        return Ruling(Decision.STOP, False, message, disposition, self.stop_reason)

    def _after_end(self, call: ToolCall) -> Ruling:
        assert self.disposition is not None
        return Ruling(
            Decision.REFUSE,
            False,
            f"fence: the run has ended ({self.disposition.value}); {call.tool} refused",
        )

    def _idle_step(self, reason: str) -> Ruling:
        """An agent turn with no action and no progress (monologue)."""
        self._count(False)
        stop = self._no_progress_stop(set())
        if stop is not None:
            disposition, stop_reason = self._end(*stop)
            return Ruling(Decision.STOP, False, stop_reason.message, disposition, stop_reason)
        nudge = self._nudge()
        if nudge is not None:
            return Ruling(Decision.NUDGE, False, nudge)
        return Ruling(Decision.CONTINUE, False, reason)

    def message(self, message: Message) -> Ruling:
        """Decide a typed message. Only ledger facts count, never the wording."""
        if self.disposition is not None:
            return Ruling(Decision.REFUSE, False, "the run has ended; the message changes nothing")
        w = self._window
        w.iteration += 1
        threshold = self.policy.identical_response_threshold
        fp = response_fingerprint(message.text)
        if fp == w.last_response:
            w.same_response += 1
        else:
            w.last_response, w.same_response = fp, 1
        kind = message.kind
        if kind is MessageKind.PARTIAL_ANSWER:
            if self.fetched:
                return self._finish(
                    Disposition.PARTIAL,
                    "partial_answer",
                    "a partial answer with eligible evidence",
                    "user",
                    evidence=tuple(sorted(self.fetched))[:20],
                )
            return self._finish(
                Disposition.BLOCKED,
                "partial_answer_without_evidence",
                "a partial answer with no eligible evidence (no successful fetch)",
                "user",
            )
        if kind is MessageKind.FAILURE_REPORT and message.blockers:
            return self._finish(
                Disposition.BLOCKED,
                "failure_report",
                "failure report: " + "; ".join(message.blockers),
                "operator",
                evidence=message.blockers,
            )
        if kind is MessageKind.FINAL_ANSWER and self.task.kind == "answer":
            grounded = [s for s in message.sources if s in self.fetched]
            if grounded:
                return self._finish(
                    Disposition.COMPLETED,
                    "grounded_answer",
                    f"a final answer grounded in {len(grounded)} fetched source(s)",
                    "none",
                    evidence=tuple(grounded),
                )
        if threshold and w.same_response >= threshold:
            self._count(False)
            disposition, stop_reason = self._end(
                "no_progress",
                Disposition.NO_PROGRESS,
                "identical_responses",
                f"{w.same_response} identical responses in a row",
                "actor",
                (),
            )
            return Ruling(Decision.STOP, False, stop_reason.message, disposition, stop_reason)
        if kind is MessageKind.FINAL_ANSWER:
            why = (
                "a final answer in a build task is a checkpoint: only verdicts complete a build"
                if self.task.kind == "build"
                else "an ungrounded final answer stays a checkpoint: cite a source fetched "
                "successfully"
            )
        else:
            why = f"a {kind.value} never ends a run"
        ruling = self._idle_step(why)
        if (
            ruling.decision is Decision.CONTINUE
            and threshold
            and w.same_response == threshold - 1
            and w.same_response >= 2
        ):
            return attrs.evolve(
                ruling,
                decision=Decision.NUDGE,
                reason=f"{w.same_response} identical responses in a row; do something new",
            )
        return ruling

    def refusal(self, reason: str) -> Ruling:
        """
        Decide a proposal refused before it was weighed: input the runtime cannot
        carry, arguments over a limit, a claim with nothing tried. It is a step
        without progress, like a monologue turn: refusals repeated, the same way
        or not, stop the run ``no_progress`` at the stall threshold.

        Args:
            reason: why it was refused, for the actor.
        """
        if self.disposition is not None:
            return Ruling(Decision.REFUSE, False, "the run has ended; the proposal changes nothing")
        ruling = self._idle_step(reason)
        if ruling.decision is Decision.STOP:
            return ruling
        if ruling.decision is Decision.NUDGE:
            return attrs.evolve(
                ruling, decision=Decision.REFUSE, reason=f"{reason}\n{ruling.reason}"
            )
        return attrs.evolve(ruling, decision=Decision.REFUSE)

    @staticmethod
    def claim_missing(claim: Claim) -> list[str]:
        """What an escalation claim fails to name: its condition, evidence or reason."""
        return [
            name
            for name, value in (
                ("condition", claim.condition.strip()),
                ("evidence", [e for e in claim.evidence if e.strip()]),
                ("reason", claim.reason.strip()),
            )
            if not value
        ]

    def claim(self, claim: Claim) -> Ruling:
        """Decide an escalation claim: it must name its condition, evidence and reason."""
        if self.disposition is not None:
            return Ruling(Decision.REFUSE, False, "the run has ended; the claim changes nothing")
        self._window.iteration += 1
        missing = self.claim_missing(claim)
        if missing:
            self._count(False)
            stop = self._no_progress_stop(set())
            if stop is not None:
                disposition, stop_reason = self._end(*stop)
                return Ruling(Decision.STOP, False, stop_reason.message, disposition, stop_reason)
            return Ruling(
                Decision.REFUSE,
                False,
                f"claim refused: it must name {', '.join(missing)} "
                "(the unmet condition, the evidence already obtained, and why no permitted "
                "action can resolve it)",
            )
        disposition = Disposition.BLOCKED if claim.status == "blocked" else Disposition.NEEDS_INPUT
        return self._finish(
            disposition,
            f"{claim.status}_claim",
            f"{claim.status.replace('_', ' ')}: {claim.condition.strip()}",
            "user" if claim.status == "needs_input" else "operator",
            evidence=tuple(claim.evidence),
        )

    def verdict(self, verdict: Verdict) -> Ruling:
        """Record the verifier's result; a build completes when every required check passes."""
        if self.disposition is not None:
            return Ruling(Decision.CONTINUE, False, "evidence after the end is kept, not decided")
        w = self._window
        w.iteration += 1
        key = (verdict.digest, verdict.contract)
        self.evidence.setdefault(key, {})[verdict.check] = verdict.passed
        self.state_version += 1
        delta: dict[str, Any] = {
            "evidence": f"{verdict.check}:{'pass' if verdict.passed else 'fail'}"
        }
        stale = verdict.digest != self.digest or verdict.contract != self.contract_version
        repeated = False
        if verdict.passed:
            new = w.work.add("pass", verdict.digest, verdict.check)
            self._last_failure.pop(verdict.check, None)
        else:
            signature = failure_signature(verdict.output, None)
            fkey = f"check:{verdict.check}:{signature}"
            new = w.work.add("failure", verdict.digest, fkey)
            # A repair cycle that leaves the failing condition as it was is no progress,
            # even on a new candidate.
            repeated = self._last_failure.get(verdict.check) == fkey
            self._last_failure[verdict.check] = fkey
            hit: set[tuple[str, str]] = set()
            self._occurred((verdict.digest, fkey), hit)
            if not stale and self.policy.stall_threshold:
                stop = self._no_progress_stop(hit)
                if stop is not None:
                    disposition, stop_reason = self._end(*stop)
                    return Ruling(
                        Decision.STOP, False, stop_reason.message, disposition, stop_reason, delta
                    )
        if repeated:
            new = False
            self._count(False)
        elif new:
            w.stall = 0
        if stale:
            return Ruling(
                Decision.CONTINUE,
                new,
                f"stale evidence: {verdict.check} judged another candidate than the current one",
                delta=delta,
            )
        if self.task.kind == "build" and self.passing(self.digest):
            names = sorted(self.evidence[(self.digest, self.contract_version)])
            ruling = self._finish(
                Disposition.COMPLETED,
                "checks_passed",
                f"every required check passed on candidate {self.digest[:12]}",
                "none",
                evidence=tuple(f"{name}@{self.digest}" for name in names),
            )
            return attrs.evolve(ruling, progress=True, delta=delta)
        return Ruling(
            Decision.CONTINUE,
            new,
            f"{verdict.check} {'passed' if verdict.passed else 'failed'}",
            delta=delta,
        )

    def signal(self, name: SignalName, why: str = "") -> Ruling:
        """
        Decide an outside signal: a stop signal, a user's stop, or a deadline.

        Args:
            name: the signal.
            why: what the person or host said, added to the stop reason's message.
        """
        if self.disposition is not None:
            return Ruling(Decision.CONTINUE, False, "the run has already ended")
        if name == "deadline":
            return self._finish(
                Disposition.BUDGET_EXHAUSTED, "deadline", "the deadline was reached", "operator"
            )
        who = "a stop signal" if name == "stop_signal" else "the user stopped the run"
        return self._finish(
            Disposition.STOPPED,
            name,
            f"{who}: {why}" if why.strip() else who,
            "operator" if name == "stop_signal" else "user",
        )

    def exhausted(self, reason: StopReason) -> Ruling:
        """End the run because a budget limit ran out (the caller names which)."""
        if self.disposition is not None:
            return Ruling(Decision.CONTINUE, False, "the run has already ended")
        self.disposition = Disposition.BUDGET_EXHAUSTED
        self.stop_reason = reason
        self.state_version += 1
        return Ruling(Decision.STOP, False, reason.message, self.disposition, reason)

    def fail(self, code: str, message: str) -> Ruling:
        """End the run as ``failed`` (the actor crashed, the runtime broke)."""
        if self.disposition is not None:
            return Ruling(Decision.CONTINUE, False, "the run has already ended")
        return self._finish(Disposition.FAILED, code, message, "operator")

    def user(self, text: str) -> Ruling:
        """A new instruction from a person starts a fresh window."""
        if self.disposition is not None:
            return Ruling(Decision.CONTINUE, False, "the run has already ended")
        self._window = _Window()
        self._window.seen[self.digest] = None
        self.state_version += 1
        return Ruling(Decision.CONTINUE, False, "a new instruction: a fresh progress window")

    # -- snapshots ----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """
        Return the decision core's state as plain JSON-able data.

        It holds everything later decisions depend on: the candidate and the
        candidates seen, the distinct work (its items' hashes and their running
        sum), the failure counts, the evidence, the sources fetched, the outcome
        of every action taken, the loop-shape window, the streak counters and the
        disposition. It names its format, the policy version and a digest of the
        task facts it was taken under: :meth:`restore` refuses it under others. Its
        size follows the state, not the history: about 45 bytes per distinct action.
        """
        w = self._window
        return {
            "format": SNAPSHOT_FORMAT,
            "policy_version": self.policy_version,
            "facts": facts_digest(self.task),
            "digest": self.digest,
            "contract_version": self.contract_version,
            "disposition": None if self.disposition is None else self.disposition.value,
            "stop_reason": None if self.stop_reason is None else to_jsonable(self.stop_reason),
            "state_version": self.state_version,
            "actions": self.actions,
            "rescues": self.rescues,
            "rescue_text": self._rescue_text,
            "evidence": [
                [d, c, [[check, passed] for check, passed in verdicts.items()]]
                for (d, c), verdicts in self.evidence.items()
            ],
            "last_failure": [[check, key] for check, key in self._last_failure.items()],
            "fetched": sorted(self.fetched),
            "window": {
                "work": w.work.snapshot(),
                "seen": list(w.seen),
                "stall": w.stall,
                "same_response": w.same_response,
                "last_response": w.last_response,
                "polls": [[f"{k:016x}", fp, n] for k, (fp, n) in w.polls.items()],
                "failures": [[d, sig, list(seen)] for (d, sig), seen in w.failures.items()],
                "iteration": w.iteration,
                "tool_streaks": [[tool, n] for tool, n in w.tool_streaks.items()],
                "outcome_actions": pack64(list(w.outcomes)),
                "outcome_values": pack64(list(w.outcomes.values())),
                "idle": [[action, failure] for action, failure in w.idle.items()],
                "shapes": [[f"{k:016x}", outcome] for k, outcome in w.shapes],
            },
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """
        Replace this decision core's state by the one a :meth:`snapshot` holds.

        The task facts, the policy and ``missing_files`` stay this judge's own: the
        snapshot must have been taken under the same facts and policy version.

        Raises:
            SnapshotRefused: the snapshot has another format, policy version or task
                facts, or is not a snapshot at all. The judge is left as it was.
        """
        if not isinstance(snapshot, Mapping):
            raise SnapshotRefused(f"a snapshot is a JSON object, got {type(snapshot).__name__}")
        fmt = snapshot.get("format")
        if fmt != SNAPSHOT_FORMAT:
            raise SnapshotRefused(
                f"snapshot format {fmt!r}: this proctor reads format {SNAPSHOT_FORMAT}"
            )
        version = snapshot.get("policy_version")
        if version != self.policy_version:
            raise SnapshotRefused(
                f"the snapshot was taken under policy {version!r}, not {self.policy_version!r}"
            )
        if snapshot.get("facts") != facts_digest(self.task):
            raise SnapshotRefused("the snapshot was taken under other task facts")
        try:
            fields, window = self._decode(snapshot)
        except (
            KeyError,
            TypeError,
            ValueError,
            binascii.Error,
            cattrs.BaseValidationError,
        ) as exc:
            raise SnapshotRefused(f"not a snapshot of the decision core: {exc}") from exc
        for name, value in fields.items():
            setattr(self, name, value)
        self._window = window

    def _decode(self, data: Mapping[str, Any]) -> tuple[dict[str, Any], _Window]:
        """Decode and check every part of a snapshot before anything is replaced."""
        disposition = data["disposition"]
        stop_reason = data["stop_reason"]
        evidence: dict[tuple[str, str], dict[str, bool]] = {}
        for d, c, verdicts in as_pairs(data["evidence"], 3):
            evidence[(as_str(d), as_str(c))] = {
                as_str(check): as_bool(passed) for check, passed in as_pairs(verdicts, 2)
            }
        fields: dict[str, Any] = {
            "digest": as_str(data["digest"]),
            "contract_version": as_str(data["contract_version"]),
            "disposition": None if disposition is None else Disposition(disposition),
            "stop_reason": None
            if stop_reason is None
            else converter.structure(stop_reason, StopReason),
            "state_version": as_int(data["state_version"]),
            "actions": as_int(data["actions"]),
            "rescues": as_int(data["rescues"]),
            "_rescue_text": as_str(data["rescue_text"]),
            "evidence": evidence,
            "_last_failure": {as_str(c): as_str(k) for c, k in as_pairs(data["last_failure"], 2)},
            "fetched": set(as_strs(data["fetched"])),
        }
        w = data["window"]
        depth = max(self.policy.stall_threshold, 1)
        keys, values = unpack64(w["outcome_actions"]), unpack64(w["outcome_values"])
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} actions with {len(values)} outcomes")
        window = _Window(
            work=WorkSet.from_snapshot(w["work"]),
            seen=dict.fromkeys(as_strs(w["seen"])),
            stall=as_int(w["stall"]),
            same_response=as_int(w["same_response"]),
            last_response=as_opt_str(w["last_response"]),
            polls={int(k, 16): (as_str(fp), as_int(n)) for k, fp, n in as_pairs(w["polls"], 3)},
            failures={
                (as_str(d), as_str(s)): deque((as_int(i) for i in as_ints(seen)), maxlen=depth)
                for d, s, seen in as_pairs(w["failures"], 3)
            },
            iteration=as_int(w["iteration"]),
            tool_streaks={as_str(t): as_int(n) for t, n in as_pairs(w["tool_streaks"], 2)},
            outcomes=dict(zip(keys, values, strict=True)),
            idle={as_str(a): as_opt_str(f) for a, f in as_pairs(w["idle"], 2)},
            shapes=deque(((int(k, 16), as_str(o)) for k, o in as_pairs(w["shapes"], 2)), maxlen=10),
        )
        return fields, window
