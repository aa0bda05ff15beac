from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from proctor._digest import digest
from proctor._errors import ConfigError, EffectError, WorkspaceError
from proctor.runtime._effects.ledger import (
    ABSENT,
    TRANSITIONS,
    CommandProbe,
    EffectLedger,
    EffectRecord,
    EffectState,
    FileReconciler,
    Target,
    Verdict,
    args_hash,
    current_effect_key,
    effect_key,
    file_digest,
    file_digests,
    idempotency_key,
    reconcile,
    reconciler_for,
    retry_with_backoff,
    target_of,
    transition,
    verdict_state,
)
from proctor.runtime._journal import EFFECT_STATES
from proctor.runtime._records import ToolStatus
from proctor.runtime._tools.registry import ToolContext, ToolRegistry, call_tool
from proctor.runtime._tools.spec import BUILTIN_SPECS, Effect, ToolSpec
from proctor.runtime._tools.workspace import Workspace

S = EffectState


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    root.mkdir()
    return ToolContext(Workspace.at(root), command_time_limit=30)


# --- states and transitions ----------------------------------------------------------


def test_states_are_the_journals() -> None:
    assert tuple(s.value for s in EffectState) == EFFECT_STATES
    assert set(TRANSITIONS) == set(EffectState)


def test_transitions() -> None:
    assert transition(S.PLANNED, S.DISPATCHED) is S.DISPATCHED
    assert transition("uncertain", "reconciled_not_applied") is S.RECONCILED_NOT_APPLIED
    assert transition(S.RECONCILED_NOT_APPLIED, S.DISPATCHED) is S.DISPATCHED
    terminal = {s for s, targets in TRANSITIONS.items() if not targets}
    assert terminal == {S.CONFIRMED, S.FAILED, S.RECONCILED_APPLIED, S.ESCALATED}


def test_illegal_transition_names_states_and_allowed_ones() -> None:
    with pytest.raises(EffectError) as info:
        transition(S.DISPATCHED, S.RECONCILED_APPLIED)
    message = str(info.value)
    assert "dispatched -> reconciled_applied" in message
    assert "confirmed, failed, uncertain" in message
    with pytest.raises(EffectError, match="terminal"):
        transition(S.CONFIRMED, S.DISPATCHED)
    with pytest.raises(EffectError, match="unknown effect state 'done'"):
        transition(S.PLANNED, "done")


# --- keys, hashes, targets ------------------------------------------------------------


def test_idempotency_key_is_stable_and_distinct() -> None:
    key = idempotency_key("task-1", 4, 0)
    assert key.startswith("pk-")
    assert key == idempotency_key("task-1", 4, 0)
    others = {idempotency_key("task-1", 4, 1), idempotency_key("task-1", 5, 0)}
    others |= {idempotency_key("task-2", 4, 0)}
    assert key not in others
    assert len(others) == 3


def test_args_hash_is_canonical() -> None:
    assert args_hash({"a": 1, "b": [1.0, "x"]}) == args_hash({"b": [1, "x"], "a": 1})
    assert args_hash({"a": 1}) != args_hash({"a": 2})


def test_target_of_files_resolves_spellings(ctx: ToolContext) -> None:
    spec = BUILTIN_SPECS["write_file"]
    plain = target_of(spec, {"path": "src/a.py", "content": ""}, ctx.workspace)
    assert plain == Target("file", "src/a.py")
    assert target_of(spec, {"path": "./src/x/../a.py"}, ctx.workspace) == plain
    absolute = str(ctx.workspace.root / "src" / "a.py")
    assert target_of(BUILTIN_SPECS["edit_file"], {"path": absolute}, ctx.workspace) == plain
    assert target_of(spec, {"path": "./src//a.py"}) == plain  # lexical, without a workspace
    with pytest.raises(WorkspaceError):
        target_of(spec, {"path": "../out.txt"}, ctx.workspace)


def test_target_of_other_kinds() -> None:
    cmd = target_of(BUILTIN_SPECS["run_command"], {"cmd": "python -m pytest  -q"})
    assert cmd.kind == "command"
    assert cmd == target_of(BUILTIN_SPECS["run_command"], {"cmd": "pytest -q"})
    http = ToolSpec("post", Effect.WRITE, targets=("method", "url"))
    assert target_of(http, {"method": "post", "url": "HTTP://Example.COM/items#frag"}) == Target(
        "http", "POST http://example.com/items"
    )
    res = ToolSpec("set_label", Effect.WRITE, targets=("issue",))
    assert target_of(res, {"issue": 7, "label": "x"}) == Target("resource", 'set_label {"issue":7}')
    assert target_of(ToolSpec("deploy", Effect.WRITE), {"env": "prod"}) == Target("tool", "deploy")
    with pytest.raises(EffectError, match="'issue' names the effect's target"):
        target_of(res, {"label": "x"})


def test_target_text_round_trip() -> None:
    target = Target("http", "POST http://h/items?a=b:c")
    assert target.text == "http:POST http://h/items?a=b:c"
    assert Target.parse(target.text) == target
    with pytest.raises(EffectError, match="kind:identity"):
        Target.parse("nokind")


def test_effect_key_context() -> None:
    assert current_effect_key() is None
    with effect_key("pk-1"):
        assert current_effect_key() == "pk-1"
        with effect_key("pk-2"):
            assert current_effect_key() == "pk-2"
        assert current_effect_key() == "pk-1"
    assert current_effect_key() is None


# --- the ledger ----------------------------------------------------------------------

A = Target("file", "a.txt")
B = Target("file", "b.txt")


def test_ledger_life_of_an_effect() -> None:
    ledger = EffectLedger()
    record = ledger.plan("k1", "write_file", {"path": "a.txt", "content": "x"}, A, ABSENT)
    assert record.state is S.PLANNED
    assert record.args_hash == args_hash({"path": "a.txt", "content": "x"})
    assert ledger.dispatched("k1").state is S.DISPATCHED
    assert ledger.blocks(A) is not None  # in flight: no second write to A
    assert ledger.blocks(A, "k1") is None
    assert ledger.open_targets() == set()
    assert ledger.outcome("k1", S.UNCERTAIN).state is S.UNCERTAIN
    assert ledger.open_targets() == {A}
    assert ledger.uncertain() == [ledger.get("k1")]
    with pytest.raises(EffectError, match="held by effect k1 \\(uncertain\\)"):
        ledger.plan("k2", "write_file", {"path": "a.txt", "content": "y"}, A)
    ledger.plan("k3", "write_file", {"path": "b.txt", "content": "y"}, B)  # other target
    ledger.outcome("k1", S.RECONCILED_NOT_APPLIED)
    assert ledger.blocks(A) is None
    again = ledger.plan("k1", "write_file", {"content": "x", "path": "a.txt"}, A)
    assert again.state is S.RECONCILED_NOT_APPLIED
    ledger.dispatched("k1")
    ledger.outcome("k1", S.CONFIRMED)
    with pytest.raises(EffectError, match="k1 is confirmed"):
        ledger.plan("k1", "write_file", {"path": "a.txt", "content": "x"}, A)
    assert [r.key for r in ledger.records()] == ["k1", "k3"]


def test_ledger_refuses_a_key_with_other_arguments() -> None:
    ledger = EffectLedger()
    ledger.plan("k1", "write_file", {"path": "a.txt", "content": "x"}, A)
    before = ledger.records()
    with pytest.raises(EffectError, match="reused with other arguments"):
        ledger.plan("k1", "write_file", {"path": "a.txt", "content": "y"}, A)
    assert ledger.records() == before
    with pytest.raises(EffectError, match="no effect with idempotency key 'nope'"):
        ledger.dispatched("nope")


def test_ledger_dispatch_waits_for_a_target_that_became_uncertain() -> None:
    ledger = EffectLedger()
    ledger.plan("k1", "write_file", {"path": "a.txt", "content": "1"}, A)
    ledger.plan("k2", "write_file", {"path": "a.txt", "content": "2"}, A)
    ledger.dispatched("k1")
    ledger.outcome("k1", S.UNCERTAIN)
    with pytest.raises(EffectError, match="held by effect k1"):
        ledger.dispatched("k2")
    waiting = ledger.get("k2")
    assert waiting is not None
    assert waiting.state is S.PLANNED
    ledger.outcome("k1", S.RECONCILED_APPLIED)
    assert ledger.dispatched("k2").state is S.DISPATCHED


def test_recover_open_marks_dispatches_uncertain() -> None:
    records = [
        EffectRecord("k1", "t", {}, A, args_hash({}), state=S.DISPATCHED),
        EffectRecord("k2", "t", {}, B, args_hash({}), state=S.CONFIRMED),
        EffectRecord("k3", "t", {"x": 1}, Target("tool", "t"), args_hash({"x": 1})),
    ]
    ledger = EffectLedger.from_records(records)
    moved = ledger.recover_open()
    assert [r.key for r in moved] == ["k1"]
    assert [r.state for r in ledger.records()] == [S.UNCERTAIN, S.CONFIRMED, S.PLANNED]
    assert ledger.recover_open() == []
    with pytest.raises(EffectError, match="appears twice"):
        EffectLedger.from_records([records[0], records[0]])


# --- the ledger, stateful ----------------------------------------------------------

KEYS = ("k0", "k1", "k2", "k3")
TARGETS = (Target("res", "a"), Target("res", "b"))
SENDABLE = {S.PLANNED, S.RECONCILED_NOT_APPLIED}


class LedgerMachine(RuleBasedStateMachine):
    """
    Drive a ledger with any order of events against a model of the far side.

    The model service does NOT deduplicate keys: it applies every request that
    reaches it. So "a key is never applied twice" holds only because the ledger
    lets a key be sent again just after a reconciliation said it was not applied.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ledger = EffectLedger()
        self.applied: collections.Counter[str] = collections.Counter()
        self.reached: dict[str, bool] = {}
        self.seen: dict[str, EffectState] = {}
        self.fresh = 0

    def refused(self, action: Callable[[], object]) -> None:
        before = self.ledger.records()
        with pytest.raises(EffectError):
            action()
        assert self.ledger.records() == before

    def in_state(self, state: EffectState) -> list[str]:
        return [r.key for r in self.ledger.records() if r.state is state]

    @rule(key=st.sampled_from(KEYS), where=st.integers(0, 1), variant=st.integers(0, 1))
    def plan(self, key: str, where: int, variant: int) -> None:
        args = {"where": where, "variant": variant}
        target = TARGETS[where]
        known = self.ledger.get(key)
        legal = (
            known is None or (known.args_hash == args_hash(args) and known.state in SENDABLE)
        ) and self.ledger.blocks(target, key) is None
        if not legal:
            self.refused(lambda: self.ledger.plan(key, "put", args, target))
            return
        record = self.ledger.plan(key, "put", args, target)
        assert record.state is (known.state if known else S.PLANNED)

    @rule(key=st.sampled_from(KEYS), data=st.data())
    def dispatch(self, key: str, data: st.DataObject) -> None:
        known = self.ledger.get(key)
        if (
            known is None
            or known.state not in SENDABLE
            or self.ledger.blocks(known.target, key) is not None
        ):
            self.refused(lambda: self.ledger.dispatched(key))
            return
        self.ledger.dispatched(key)
        # Sent: the request reaches the service (and is applied) or is lost on the way.
        reached = data.draw(st.booleans(), label="reached")
        self.reached[key] = reached
        if reached:
            self.applied[key] += 1

    @precondition(lambda self: self.in_state(S.DISPATCHED))
    @rule(data=st.data())
    def reply(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.in_state(S.DISPATCHED)), label="key")
        if data.draw(st.booleans(), label="reply lost"):
            self.ledger.outcome(key, S.UNCERTAIN)
        else:
            self.ledger.outcome(key, S.CONFIRMED if self.reached[key] else S.FAILED)

    @precondition(lambda self: self.in_state(S.UNCERTAIN))
    @rule(data=st.data())
    def reconcile(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.in_state(S.UNCERTAIN)), label="key")
        verdict: Verdict = "applied" if self.reached[key] else "not_applied"
        if not data.draw(st.booleans(), label="lookup answers"):
            verdict = "unknown"
        self.ledger.outcome(key, verdict_state(verdict))

    @rule()
    def resume(self) -> None:
        open_before = set(self.in_state(S.DISPATCHED))
        moved = self.ledger.recover_open()
        assert {r.key for r in moved} == open_before
        assert all(r.state is S.UNCERTAIN for r in moved)

    @rule(key=st.sampled_from((*KEYS, "unknown")), state=st.sampled_from(list(EffectState)))
    def illegal_outcome(self, key: str, state: EffectState) -> None:
        known = self.ledger.get(key)
        if known is not None and state in TRANSITIONS[known.state]:
            return  # legal moves come only from what the far side did
        self.refused(lambda: self.ledger.outcome(key, state))

    @precondition(lambda self: self.ledger.open_targets())
    @rule(data=st.data())
    def replacement_write(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(sorted(self.ledger.open_targets(), key=str)))
        holder = self.ledger.blocks(target)
        assert holder is not None
        assert holder.state in (S.UNCERTAIN, S.DISPATCHED)
        self.fresh += 1
        key = f"fresh{self.fresh}"
        self.refused(lambda: self.ledger.plan(key, "put", {"fresh": key}, target))

    @invariant()
    def never_applied_twice(self) -> None:
        assert all(count <= 1 for count in self.applied.values()), self.applied

    @invariant()
    def only_legal_transitions(self) -> None:
        for record in self.ledger.records():
            old = self.seen.get(record.key)
            if old is None:
                assert record.state is S.PLANNED
            elif old is not record.state:
                assert record.state in TRANSITIONS[old], (record.key, old, record.state)
            self.seen[record.key] = record.state

    @invariant()
    def indexes_agree_with_a_scan(self) -> None:
        # The ledger answers from indexes; a scan of every record is the truth.
        records = self.ledger.records()
        assert len(self.ledger) == len(records)
        for target in TARGETS:
            for key in (None, *KEYS):
                holding = [
                    r
                    for r in records
                    if r.target == target
                    and r.key != key
                    and r.state in (S.UNCERTAIN, S.DISPATCHED)
                ]
                assert self.ledger.blocks(target, key) == (holding[0] if holding else None)
        uncertain = [r for r in records if r.state is S.UNCERTAIN]
        assert self.ledger.uncertain() == uncertain
        assert self.ledger.open_targets() == {r.target for r in uncertain}

    @invariant()
    def one_holder_per_target(self) -> None:
        records = self.ledger.records()
        for target in TARGETS:
            holding = [
                r for r in records if r.target == target and r.state in (S.UNCERTAIN, S.DISPATCHED)
            ]
            assert len(holding) <= 1, holding
        assert self.ledger.open_targets() == {r.target for r in records if r.state is S.UNCERTAIN}


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# --- files -----------------------------------------------------------------------------


async def _effect(ctx: ToolContext, key: str, tool: str, args: dict[str, Any]) -> EffectRecord:
    """Plan an effect the way the controller does, digests taken just before dispatch."""
    before, intended = await file_digests(tool, args, ctx.workspace)
    target = target_of(BUILTIN_SPECS[tool], args, ctx.workspace)
    ledger = EffectLedger()
    return ledger.plan(key, tool, args, target, before, intended_digest=intended)


async def test_file_reconciler_write_file(ctx: ToolContext) -> None:
    registry = ToolRegistry.builtin()
    (ctx.workspace.root / "a.txt").write_text("old")
    args = {"path": "a.txt", "content": "new"}
    effect = await _effect(ctx, "k1", "write_file", args)
    assert effect.before_digest == digest(b"old")
    assert effect.intended_digest == digest(b"new")
    rec = FileReconciler()
    assert await rec.reconcile(effect, ctx) == "not_applied"
    result = await call_tool(registry, ctx, "write_file", args)
    assert result.status is ToolStatus.OK
    assert await rec.reconcile(effect, ctx) == "applied"
    (ctx.workspace.root / "a.txt").write_text("someone else")
    assert await rec.reconcile(effect, ctx) == "unknown"
    # Without the digests taken at plan time, the content still says "applied".
    bare = EffectRecord("k2", "write_file", args, effect.target, args_hash(args))
    (ctx.workspace.root / "a.txt").write_text("new")
    assert await rec.reconcile(bare, ctx) == "applied"
    (ctx.workspace.root / "a.txt").write_text("old")
    assert await rec.reconcile(bare, ctx) == "unknown"


async def test_file_reconciler_new_file_and_delete(ctx: ToolContext) -> None:
    registry = ToolRegistry.builtin()
    create = await _effect(ctx, "k1", "write_file", {"path": "d/new.txt", "content": "x"})
    assert create.before_digest == ABSENT
    assert await FileReconciler().reconcile(create, ctx) == "not_applied"
    await call_tool(registry, ctx, "write_file", {"path": "d/new.txt", "content": "x"})
    assert await FileReconciler().reconcile(create, ctx) == "applied"
    delete = await _effect(ctx, "k2", "delete_file", {"path": "d/new.txt"})
    assert delete.intended_digest == ABSENT
    assert await FileReconciler().reconcile(delete, ctx) == "not_applied"
    await call_tool(registry, ctx, "delete_file", {"path": "d/new.txt"})
    assert await FileReconciler().reconcile(delete, ctx) == "applied"


async def test_file_reconciler_edit_file(ctx: ToolContext) -> None:
    registry = ToolRegistry.builtin()
    (ctx.workspace.root / "m.py").write_text("x = 1\ny = 1\n")
    args = {"path": "m.py", "old": "= 1", "new": "= 2"}
    effect = await _effect(ctx, "k1", "edit_file", args)
    assert effect.intended_digest == digest(b"x = 2\ny = 1\n")
    assert await FileReconciler().reconcile(effect, ctx) == "not_applied"
    await call_tool(registry, ctx, "edit_file", args)
    assert await FileReconciler().reconcile(effect, ctx) == "applied"
    # An edit whose text is not in the file has no intended digest: only "not applied" is known.
    missing = await _effect(ctx, "k2", "edit_file", {"path": "m.py", "old": "zzz", "new": "q"})
    assert missing.intended_digest is None
    assert await FileReconciler().reconcile(missing, ctx) == "not_applied"
    (ctx.workspace.root / "m.py").write_text("changed")
    assert await FileReconciler().reconcile(missing, ctx) == "unknown"


async def test_file_reconciler_cannot_tell(ctx: ToolContext) -> None:
    (ctx.workspace.root / "dir").mkdir()
    assert file_digest(ctx.workspace.root / "dir") is None
    args = {"path": "dir", "content": "x"}
    effect = EffectRecord("k", "write_file", args, Target("file", "dir"), args_hash(args), ABSENT)
    assert await FileReconciler().reconcile(effect, ctx) == "unknown"
    outside = EffectRecord("k", "write_file", {"path": "../x", "content": ""}, A, "h")
    assert await FileReconciler().reconcile(outside, ctx) == "unknown"
    other = EffectRecord("k", "run_command", {"cmd": "true"}, A, "h")
    assert await FileReconciler().reconcile(other, ctx) == "unknown"
    assert await file_digests("run_command", {"cmd": "true"}, ctx.workspace) == (None, None)


# --- command probes ------------------------------------------------------------------


def _cmd_effect(key: str = "pk-probe") -> EffectRecord:
    args = {"cmd": "make deploy"}
    target = target_of(BUILTIN_SPECS["run_command"], args)
    return EffectRecord(key, "run_command", args, target, args_hash(args), state=S.UNCERTAIN)


async def test_command_probe_exit_codes(ctx: ToolContext) -> None:
    probe = CommandProbe(["sh", "-c", "test -f deployed"])
    with anyio.fail_after(20):
        assert await probe.reconcile(_cmd_effect(), ctx) == "not_applied"
        (ctx.workspace.root / "deployed").write_text("")
        assert await probe.reconcile(_cmd_effect(), ctx) == "applied"
        assert await CommandProbe(["sh", "-c", "exit 3"]).reconcile(_cmd_effect(), ctx) == "unknown"
        missing = CommandProbe(["/nonexistent/probe"])
        assert await missing.reconcile(_cmd_effect(), ctx) == "unknown"
        slow = CommandProbe(["sleep", "30"], time_limit=0.2)
        assert await slow.reconcile(_cmd_effect(), ctx) == "unknown"
    assert ctx.groups.live() == ()


def test_command_probe_wants_an_argv() -> None:
    assert CommandProbe(["test", "-f", "x"]).argv == ("test", "-f", "x")
    with pytest.raises(ConfigError, match="a program and its arguments"):
        CommandProbe("test -f x")
    with pytest.raises(ConfigError, match="a program and its arguments"):
        CommandProbe([])


async def test_command_probe_sees_the_key(ctx: ToolContext) -> None:
    probe = CommandProbe(
        ["sh", "-c", 'test "$PROCTOR_EFFECT_KEY" = pk-7 && test "$PROCTOR_EFFECT_TARGET" = "$T"']
    )
    effect = _cmd_effect("pk-7")
    ctx = ToolContext(ctx.workspace, env={"PATH": "/usr/bin:/bin", "T": effect.target.text})
    with anyio.fail_after(20):
        assert await probe.reconcile(effect, ctx) == "applied"
        assert await probe.reconcile(_cmd_effect("pk-8"), ctx) == "not_applied"


# --- reconcile() and reconciler_for() ---------------------------------------------------


class _Raising:
    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        raise OSError("lookup refused")


class _Bad:
    async def reconcile(self, effect: EffectRecord, ctx: ToolContext) -> Verdict:
        return "maybe"  # type: ignore[return-value]


async def test_reconcile_says_unknown_rather_than_guess(ctx: ToolContext) -> None:
    effect = _cmd_effect()
    assert await reconcile(effect, None, ctx) == "unknown"
    assert await reconcile(effect, _Raising(), ctx) == "unknown"
    assert await reconcile(effect, _Bad(), ctx) == "unknown"
    assert verdict_state("unknown") is S.ESCALATED
    assert verdict_state("applied") is S.RECONCILED_APPLIED
    assert verdict_state("not_applied") is S.RECONCILED_NOT_APPLIED
    with pytest.raises(ConfigError, match="applied, not_applied or unknown"):
        verdict_state("maybe")  # type: ignore[arg-type]


def test_reconciler_for() -> None:
    registry = ToolRegistry.builtin()
    assert isinstance(reconciler_for("write_file", registry.get("write_file")), FileReconciler)
    assert isinstance(reconciler_for("delete_file"), FileReconciler)
    assert reconciler_for("run_command", registry.get("run_command")) is None
    probe = CommandProbe(["true"])
    assert reconciler_for("run_command", None, {"run_command": probe}) is probe


# --- retries -------------------------------------------------------------------------


class _Flaky:
    def __init__(self, failures: int, exc: Exception | None = None) -> None:
        self.failures = failures
        self.calls = 0
        self.exc = exc or OSError("down")

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return "done"


class _Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_backoff_is_exponential_capped_and_jittered() -> None:
    sleep = _Sleeps()
    flaky = _Flaky(5)
    result = await retry_with_backoff(
        flaky, attempts=6, base=1.0, cap=5.0, sleep=sleep, rng=lambda: 0.5
    )
    assert result == "done"
    assert flaky.calls == 6
    assert sleep.delays == [0.5, 1.0, 2.0, 2.5, 2.5]


async def test_backoff_full_jitter_uses_the_whole_range() -> None:
    sleep = _Sleeps()
    draws = iter([0.0, 0.999])
    await retry_with_backoff(
        _Flaky(2), attempts=3, base=2.0, cap=30.0, sleep=sleep, rng=lambda: next(draws)
    )
    assert sleep.delays == [0.0, pytest.approx(3.996)]


async def test_backoff_gives_up_after_attempts() -> None:
    sleep = _Sleeps()
    flaky = _Flaky(10)
    with pytest.raises(OSError, match="down"):
        await retry_with_backoff(flaky, attempts=3, sleep=sleep, rng=lambda: 1.0)
    assert flaky.calls == 3
    assert sleep.delays == [0.5, 1.0]


async def test_backoff_stops_when_the_bucket_says_no() -> None:
    tokens = [True]
    sleep = _Sleeps()
    flaky = _Flaky(10)

    def take() -> bool:
        return bool(tokens) and tokens.pop()

    with pytest.raises(OSError, match="down"):
        await retry_with_backoff(flaky, attempts=10, bucket_take=take, sleep=sleep, rng=lambda: 0)
    assert flaky.calls == 2
    assert len(sleep.delays) == 1


async def test_backoff_does_not_retry_other_errors() -> None:
    sleep = _Sleeps()
    flaky = _Flaky(1, KeyError("bug"))
    with pytest.raises(KeyError):
        await retry_with_backoff(flaky, attempts=5, retry_on=(OSError,), sleep=sleep)
    assert flaky.calls == 1
    assert sleep.delays == []
    assert await retry_with_backoff(_Flaky(0), attempts=1, sleep=sleep) == "done"


@pytest.mark.parametrize(
    ("attempts", "base", "cap"), [(0, 0.5, 30.0), (1, -1.0, 30.0), (1, 5.0, 1.0)]
)
async def test_backoff_rejects_bad_settings(attempts: int, base: float, cap: float) -> None:
    with pytest.raises(ConfigError):
        await retry_with_backoff(_Flaky(0), attempts=attempts, base=base, cap=cap)
