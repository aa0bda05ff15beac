from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor._errors import (
    ConfigError,
    EffectError,
    FencedError,
    JournalError,
    RunNotFoundError,
    SchemaError,
)
from proctor._wire import to_jsonable
from proctor.runtime._journal import (
    EFFECT_STATES,
    SCHEMA_VERSION,
    Journal,
    RunRow,
    open_journal,
)
from proctor.runtime._records import (
    Decision,
    Disposition,
    StopReason,
    ToolStatus,
    TraceRecord,
)

TASK = "task-1"
RUN_IDS = itertools.count()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)
POLICY: dict[str, Any] = {"stall_threshold": 4}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proctor.db"


@pytest.fixture
async def journal(db_path: Path) -> AsyncIterator[Journal]:
    async with open_journal(db_path) as j:
        await j.put_task(TASK, "make the tests pass", {"kind": "build"}, "c1")
        yield j


async def new_run(j: Journal, run_id: str, task_id: str = TASK) -> int:
    return await j.create_run(run_id, task_id, policy=POLICY, policy_version="p1", host="h1")


def step(run_id: str, n: int, **changes: Any) -> dict[str, Any]:
    record = TraceRecord(
        trace_id="trace-1",
        run_id=run_id,
        step=n,
        kind="action",
        action='{"tool":"write_file"}',
        tool_status=ToolStatus.OK,
        result_fingerprint=f"fp{n}",
        state_version=n,
        state_delta={"files": ["a.py"], "nested": {"é": [1, 2.5, None]}},
        remaining={"steps": 60.0 - n, "cost_usd": 2.5},
        decision=Decision.CONTINUE,
        progress=n % 2 == 1,
        reason="new file content",
        stop_reason=None,
        disposition=None,
        policy_version="p1",
        at=1_700_000_000.0 + n,
    )
    data: dict[str, Any] = to_jsonable(record)
    data.update(changes)
    return data


async def dispatch(j: Journal, run_id: str, epoch: int, key: str, args_hash: str = "h") -> None:
    await j.record_dispatch(
        run_id=run_id,
        epoch=epoch,
        key=key,
        task_id=TASK,
        step=1,
        tool="write_file",
        target="a.py",
        args_hash=args_hash,
    )


async def end(j: Journal, run_id: str, epoch: int, disposition: str = "completed") -> None:
    await j.end_run(
        run_id,
        epoch,
        disposition=disposition,
        stop_reason={"code": "checks_passed"},
        candidate_digest="d1",
        handoff={"next_step": "none"},
    )


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    return version


# -- opening and schema --------------------------------------------------------------


async def test_open_creates_the_schema_in_wal_mode(db_path: Path) -> None:
    async with open_journal(db_path) as j:
        assert j.path == str(db_path)
        assert await j.integrity_check() == "ok"
    assert user_version(db_path) == SCHEMA_VERSION
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    expected = {"tasks", "runs", "steps", "effects", "evidence", "spend", "processes", "notes"}
    assert expected <= tables


async def test_migrations_are_idempotent(db_path: Path) -> None:
    async with open_journal(db_path) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        await new_run(j, "run-a")
    # Opening again applies nothing and loses nothing.
    async with open_journal(db_path) as j:
        assert (await j.get_run("run-a")).epoch == 1
    # Re-running every migration on a current journal is harmless too.
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    async with open_journal(db_path) as j:
        assert (await j.get_run("run-a")).goal == "goal"
    assert user_version(db_path) == SCHEMA_VERSION


async def test_a_newer_schema_is_refused(db_path: Path) -> None:
    async with open_journal(db_path):
        pass
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError) as info:
        await Journal.open(db_path)
    message = str(info.value)
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"up to {SCHEMA_VERSION}" in message
    assert str(db_path) in message
    assert user_version(db_path) == SCHEMA_VERSION + 1


async def test_a_file_that_is_not_a_journal_is_a_journal_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, just words " * 100)
    with pytest.raises(JournalError) as info:
        await Journal.open(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.Error)


async def test_a_bad_synchronous_level_is_refused(db_path: Path) -> None:
    with pytest.raises(ConfigError, match="NORMAL"):
        await Journal.open(db_path, synchronous="SOMETIMES")  # type: ignore[arg-type]


async def test_reopened_journal_keeps_its_data(db_path: Path) -> None:
    j = await Journal.open(db_path)
    async with j:
        await j.put_task(TASK, "goal", {"a": 1}, "c1")
        epoch = await new_run(j, "run-a")
        await j.append_step("run-a", epoch, step("run-a", 1))
    await j.close()  # closing twice is fine
    with pytest.raises(JournalError, match="closed"):
        await j.steps("run-a")
    async with await Journal.open(db_path) as again:
        assert [s["step"] for s in await again.steps("run-a")] == [1]
        assert (await again.get_task(TASK))["spec"] == {"a": 1}


async def test_a_second_connection_sees_committed_data(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    await journal.append_step("run-a", epoch, step("run-a", 1))
    await dispatch(journal, "run-a", epoch, "k1")
    async with open_journal(journal.path) as other:
        assert len(await other.steps("run-a")) == 1
        assert [e.key for e in await other.effects(run_id="run-a")] == ["k1"]
        # And the other way round: the second connection writes, the first reads.
        await other.add_note("run-a", "amendment", {"why": "typo"})
    assert [n["body"] for n in await journal.notes("run-a")] == [{"why": "typo"}]


# -- tasks and runs ------------------------------------------------------------------


async def test_put_task_updates_spec_and_contract(journal: Journal) -> None:
    await journal.put_task(TASK, "another goal", {"kind": "answer"}, "c2")
    task = await journal.get_task(TASK)
    assert task["goal"] == "make the tests pass"
    assert task["spec"] == {"kind": "answer"}
    assert task["contract_version"] == "c2"
    with pytest.raises(JournalError, match="no task"):
        await journal.get_task("nope")


async def test_epochs_increment_per_task(journal: Journal) -> None:
    await journal.put_task("task-2", "other", {}, "c1")
    assert await new_run(journal, "run-a") == 1
    assert await new_run(journal, "run-b") == 2
    assert await new_run(journal, "run-x", task_id="task-2") == 1
    assert (
        await journal.create_run(
            "run-c", TASK, policy=POLICY, policy_version="p1", host="h2", parent_run_id="run-b"
        )
        == 3
    )
    runs = await journal.runs_of_task(TASK)
    assert [(r.run_id, r.epoch) for r in runs] == [("run-a", 1), ("run-b", 2), ("run-c", 3)]
    assert runs[2].parent_run_id == "run-b"
    assert runs[2].host == "h2"


async def test_create_run_errors(journal: Journal) -> None:
    await new_run(journal, "run-a")
    with pytest.raises(JournalError, match="already exists"):
        await new_run(journal, "run-a")
    with pytest.raises(JournalError, match="not in the journal"):
        await new_run(journal, "run-b", task_id="unknown-task")


async def test_get_run_reads_back_everything(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    run = await journal.get_run("run-a")
    assert run.status == "running"
    assert run.disposition is None
    assert run.policy == POLICY
    assert run.policy_version == "p1"
    assert run.goal == "make the tests pass"
    assert run.steps == 0
    assert run.ended_at is None
    await journal.append_steps("run-a", epoch, [step("run-a", 1), step("run-a", 2)])
    await end(journal, "run-a", epoch, "partial")
    run = await journal.get_run("run-a")
    assert run.status == run.disposition == "partial"
    assert run.stop_reason == {"code": "checks_passed"}
    assert run.candidate_digest == "d1"
    assert run.handoff == {"next_step": "none"}
    assert run.ended_at is not None
    assert run.steps == 2


async def test_list_runs_newest_first(journal: Journal) -> None:
    for name in ("run-a", "run-b", "run-c"):
        await new_run(journal, name)
    assert [r.run_id for r in await journal.list_runs()] == ["run-c", "run-b", "run-a"]
    assert [r.run_id for r in await journal.list_runs(limit=1)] == ["run-c"]


async def test_run_prefix_lookup(journal: Journal) -> None:
    await new_run(journal, "abcdef123456")
    await new_run(journal, "abcdef999999")
    await new_run(journal, "0123456789ab")
    assert (await journal.get_run("abcdef12")).run_id == "abcdef123456"
    assert (await journal.get_run("012345")).run_id == "0123456789ab"
    with pytest.raises(RunNotFoundError, match="ambiguous"):
        await journal.get_run("abcdef")
    with pytest.raises(RunNotFoundError, match="6"):
        await journal.get_run("01234")  # too short to be a prefix
    with pytest.raises(RunNotFoundError):
        await journal.get_run("fffffff")


async def test_run_prefix_whose_successor_cannot_be_spelled(journal: Journal) -> None:
    await new_run(journal, "run-a\U0010ffff-tail")
    await new_run(journal, "run-b\U0010ffff-tail")
    assert (await journal.get_run("run-a\U0010ffff")).run_id == "run-a\U0010ffff-tail"


async def test_unknown_run(journal: Journal) -> None:
    with pytest.raises(RunNotFoundError, match="no run 'missing-run'"):
        await journal.get_run("missing-run")
    with pytest.raises(RunNotFoundError):
        await journal.append_step("missing-run", 1, step("missing-run", 1))
    with pytest.raises(RunNotFoundError):
        await end(journal, "missing-run", 1)
    with pytest.raises(RunNotFoundError):
        await dispatch(journal, "missing-run", 1, "k")


async def test_end_run_is_fenced(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    with pytest.raises(FencedError, match="epoch"):
        await end(journal, "run-a", epoch + 1)
    assert (await journal.get_run("run-a")).status == "running"
    await end(journal, "run-a", epoch)
    with pytest.raises(FencedError, match="ended"):
        await end(journal, "run-a", epoch, "failed")
    assert (await journal.get_run("run-a")).status == "completed"


async def test_end_run_rejects_non_terminal_dispositions(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    with pytest.raises(ConfigError, match="completed"):
        await end(journal, "run-a", epoch, "continue")


async def test_durable_writes_under_a_full_journal(db_path: Path) -> None:
    async with open_journal(db_path, synchronous="FULL") as j:
        await j.put_task(TASK, "goal", {}, "c1")
        epoch = await new_run(j, "run-a")
        await dispatch(j, "run-a", epoch, "k1")
        await end(j, "run-a", epoch)
        assert (await j.get_run("run-a")).status == "completed"


# -- steps ---------------------------------------------------------------------------


async def test_steps_round_trip(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    last = to_jsonable(
        TraceRecord(
            trace_id="trace-1",
            run_id="run-a",
            step=3,
            kind="ended",
            action=None,
            tool_status=None,
            result_fingerprint=None,
            state_version=3,
            state_delta={},
            remaining={},
            decision=Decision.STOP,
            progress=False,
            reason="checks passed",
            stop_reason=StopReason(code="checks_passed", evidence=("e1",)),
            disposition=Disposition.COMPLETED,
            policy_version="p1",
            at=1_700_000_003.0,
            event={"type": "complete", "summary": "done"},
        )
    )
    records = [step("run-a", 1), step("run-a", 2), last]
    await journal.append_step("run-a", epoch, records[0])
    await journal.append_steps("run-a", epoch, records[1:])
    assert await journal.steps("run-a") == records
    assert (await journal.steps("run-a"))[0]["progress"] is True
    assert await journal.steps("other-run") == []


async def test_fields_without_a_column_are_kept(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    record = step("run-a", 1, annotations={"by": "reviewer"})
    await journal.append_step("run-a", epoch, record)
    assert await journal.steps("run-a") == [record]


# The examples share the function's journal on purpose: each writes its own run.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    state_delta=st.dictionaries(st.text(), JSON_VALUES, max_size=4),
    remaining=st.dictionaries(st.text(), st.floats(allow_nan=False), max_size=4),
    reason=st.text(),
)
async def test_steps_round_trip_any_json(
    journal: Journal, state_delta: dict[str, Any], remaining: dict[str, float], reason: str
) -> None:
    run_id = f"run-{next(RUN_IDS)}"
    epoch = await new_run(journal, run_id)
    record = step(run_id, 1, state_delta=state_delta, remaining=remaining, reason=reason)
    await journal.append_step(run_id, epoch, record)
    assert await journal.steps(run_id) == [record]


async def test_a_duplicate_step_is_an_error(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    await journal.append_step("run-a", epoch, step("run-a", 1))
    with pytest.raises(JournalError, match="already journaled") as info:
        await journal.append_step("run-a", epoch, step("run-a", 1, reason="again"))
    assert not isinstance(info.value, FencedError)
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert str(journal.path) in str(info.value)
    # A batch with a duplicate writes none of its steps.
    with pytest.raises(JournalError, match="already journaled"):
        await journal.append_steps("run-a", epoch, [step("run-a", 2), step("run-a", 1)])
    assert [s["reason"] for s in await journal.steps("run-a")] == ["new file content"]


async def test_steps_are_fenced_by_epoch_not_status(journal: Journal) -> None:
    await new_run(journal, "run-a")
    epoch = await new_run(journal, "run-b")
    with pytest.raises(FencedError, match="epoch"):
        await journal.append_step("run-b", epoch - 1, step("run-b", 1))
    with pytest.raises(FencedError):
        await journal.append_steps("run-b", epoch + 1, [step("run-b", 1), step("run-b", 2)])
    assert await journal.steps("run-b") == []
    await end(journal, "run-b", epoch)
    # A refusal recorded after the end is still a step of the run.
    await journal.append_step("run-b", epoch, step("run-b", 1, tool_status="refused"))
    assert [s["tool_status"] for s in await journal.steps("run-b")] == ["refused"]


async def test_a_cancelled_batch_is_all_or_nothing(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    batch = [step("run-a", n) for n in range(1, 51)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(journal.append_steps, "run-a", epoch, batch)
        # The batch is now waiting on the connection's thread, inside its transaction.
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    written = len(await journal.steps("run-a"))
    assert written in (0, len(batch))
    # No transaction was left open: the journal takes the next batch.
    more = [step("run-a", n) for n in range(written + 1, written + 3)]
    await journal.append_steps("run-a", epoch, more)
    assert len(await journal.steps("run-a")) == written + 2


async def test_malformed_step_records(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    record = step("run-a", 1)
    del record["remaining"]
    with pytest.raises(ConfigError, match="remaining"):
        await journal.append_step("run-a", epoch, record)
    with pytest.raises(ConfigError, match="run-z"):
        await journal.append_step("run-a", epoch, step("run-z", 1))
    await journal.append_steps("run-a", epoch, [])
    assert await journal.steps("run-a") == []


# -- effects -------------------------------------------------------------------------


async def test_dispatch_is_refused_after_the_run_ended(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    await end(journal, "run-a", epoch)
    with pytest.raises(FencedError, match="ended"):
        await dispatch(journal, "run-a", epoch, "k1")
    assert await journal.effects() == []


async def test_dispatch_is_refused_under_a_stale_epoch(journal: Journal) -> None:
    await new_run(journal, "run-a")
    epoch = await new_run(journal, "run-b")
    with pytest.raises(FencedError, match="epoch"):
        await dispatch(journal, "run-b", epoch - 1, "k1")
    with pytest.raises(FencedError):
        # run-a's own epoch is 1, but a fresh key is still fenced for another epoch.
        await dispatch(journal, "run-a", epoch, "k2")
    assert await journal.effects() == []


async def test_a_key_reused_with_other_arguments(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    await dispatch(journal, "run-a", epoch, "k1", args_hash="h1")
    with pytest.raises(EffectError, match="k1 reused with other arguments"):
        await dispatch(journal, "run-a", epoch, "k1", args_hash="h2")
    [effect] = await journal.effects()
    assert effect.args_hash == "h1"


async def test_a_retry_with_the_same_arguments_dispatches_again(journal: Journal) -> None:
    epoch = await new_run(journal, "run-a")
    await dispatch(journal, "run-a", epoch, "k1")
    await journal.settle_effect("k1", "uncertain", {"error": "timeout"})
    await end(journal, "run-a", epoch, "stopped")
    # The resumed run reconciles and retries the same call under the same key.
    epoch_b = await journal.create_run(
        "run-b", TASK, policy=POLICY, policy_version="p1", host="h1", parent_run_id="run-a"
    )
    await dispatch(journal, "run-b", epoch_b, "k1")
    [effect] = await journal.effects()
    assert (effect.key, effect.run_id, effect.state, effect.outcome) == (
        "k1",
        "run-b",
        "dispatched",
        None,
    )
    assert effect.updated_at >= effect.created_at


async def test_effects_settle_and_filter(journal: Journal) -> None:
    await journal.put_task("task-2", "other", {}, "c1")
    epoch = await new_run(journal, "run-a")
    epoch_x = await new_run(journal, "run-x", task_id="task-2")
    for key in ("k1", "k2", "k3"):
        await dispatch(journal, "run-a", epoch, key)
    await journal.record_dispatch(
        run_id="run-x",
        epoch=epoch_x,
        key="x1",
        task_id="task-2",
        step=4,
        tool="http_post",
        target="https://example.org",
        args_hash="hx",
    )
    await journal.settle_effect("k1", "confirmed", {"exit_code": 0})
    await journal.settle_effect("k2", "uncertain", None)

    assert [e.key for e in await journal.effects()] == ["k1", "k2", "k3", "x1"]
    assert [e.key for e in await journal.effects(task_id=TASK)] == ["k1", "k2", "k3"]
    assert [e.key for e in await journal.effects(run_id="run-x")] == ["x1"]
    open_states = ("dispatched", "uncertain")
    assert [e.key for e in await journal.effects(task_id=TASK, states=open_states)] == [
        "k2",
        "k3",
    ]
    assert [e.key for e in await journal.effects(states=["confirmed"])] == ["k1"]
    assert await journal.effects(states=[]) == []
    [k1] = await journal.effects(states=["confirmed"])
    assert k1.outcome == {"exit_code": 0}
    assert (k1.tool, k1.target, k1.step, k1.task_id) == ("write_file", "a.py", 1, TASK)

    with pytest.raises(ConfigError, match="reconciled_applied"):
        await journal.settle_effect("k1", "done", None)
    with pytest.raises(EffectError, match="nope"):
        await journal.settle_effect("nope", "confirmed", None)
    assert set(EFFECT_STATES) >= {"planned", "escalated"}


# -- evidence, spend, processes, notes -------------------------------------------------


async def test_evidence(journal: Journal) -> None:
    await journal.put_task("task-2", "other", {}, "c1")
    await new_run(journal, "run-a")
    await new_run(journal, "run-b")
    await new_run(journal, "run-x", task_id="task-2")

    def evidence(check: str, passed: bool) -> dict[str, Any]:
        return {
            "candidate_digest": "d1",
            "contract_version": "c1",
            "check": check,
            "passed": passed,
            "at": 1.5,
            "output": "3 passed",
        }

    await journal.add_evidence("run-a", TASK, evidence("tests", False))
    await journal.add_evidence("run-b", TASK, evidence("tests", True))
    await journal.add_evidence("run-x", "task-2", evidence("lint", True))
    assert [e["passed"] for e in await journal.evidence(task_id=TASK)] == [False, True]
    assert await journal.evidence(run_id="run-b") == [evidence("tests", True)]
    assert await journal.evidence(run_id="run-b", task_id="task-2") == []
    assert len(await journal.evidence()) == 3
    with pytest.raises(ConfigError, match="check"):
        await journal.add_evidence(
            "run-a", TASK, {"candidate_digest": "d1", "contract_version": "c1"}
        )


async def test_spend_totals(journal: Journal) -> None:
    await new_run(journal, "run-a")
    await new_run(journal, "run-b")
    await journal.add_spend(TASK, "run-a", {"steps": 1, "tokens_in": 100.0}, "reserve")
    await journal.add_spend(TASK, "run-a", {"steps": 1, "tokens_in": 80.0}, "settle")
    await journal.add_spend(TASK, "run-a", {"tokens_in": 20.0}, "release", note="unused")
    await journal.add_spend(TASK, "run-b", {"steps": 2, "cost_usd": 0.25}, "charge")
    await journal.add_spend(TASK, "run-b", {}, "charge")
    assert await journal.spend_totals(TASK) == {"cost_usd": 0.25, "steps": 3.0, "tokens_in": 80.0}
    assert await journal.spend_totals(TASK, kinds=["reserve"]) == {
        "steps": 1.0,
        "tokens_in": 100.0,
    }
    assert await journal.spend_totals("task-2") == {}
    with pytest.raises(ConfigError, match="settle"):
        await journal.add_spend(TASK, "run-a", {"steps": 1}, "refund")
    with pytest.raises(ConfigError, match="finite"):
        await journal.add_spend(TASK, "run-a", {"steps": 1, "cost_usd": float("inf")}, "charge")
    assert await journal.spend_totals(TASK, kinds=["release"]) == {"tokens_in": 20.0}


async def test_processes(journal: Journal) -> None:
    await new_run(journal, "run-a")
    await journal.record_process("run-a", 4242, "pytest -q")
    await journal.record_process("run-a", 4343, "make")
    await journal.end_process("run-a", 4242, "exited")
    await journal.end_process("run-a", 4242, "killed")  # nothing open: nothing changes
    # The pgid is reused later by another child: only the open record is ended.
    await journal.record_process("run-a", 4242, "pytest -x")
    await journal.end_process("run-a", 4242, "terminated")
    rows = await journal.processes("run-a")
    assert [(p.pgid, p.command, p.how) for p in rows] == [
        (4242, "pytest -q", "exited"),
        (4343, "make", None),
        (4242, "pytest -x", "terminated"),
    ]
    assert rows[1].ended_at is None
    assert rows[0].ended_at is not None
    assert await journal.processes("run-b") == []


async def test_notes(journal: Journal) -> None:
    await new_run(journal, "run-a")
    await journal.add_note("run-a", "amendment", {"contract_version": "c2"})
    await journal.add_note("run-a", "retune", {"stall_threshold": 6})
    notes = await journal.notes("run-a")
    assert [(n["run_id"], n["kind"], n["body"]) for n in notes] == [
        ("run-a", "amendment", {"contract_version": "c2"}),
        ("run-a", "retune", {"stall_threshold": 6}),
    ]
    assert await journal.notes("run-b") == []


async def test_writes_for_unknown_runs_are_journal_errors(journal: Journal) -> None:
    with pytest.raises(JournalError, match="FOREIGN KEY") as info:
        await journal.add_note("no-such-run", "x", {})
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)


async def test_run_rows_are_plain_records(journal: Journal) -> None:
    await new_run(journal, "run-a")
    run = await journal.get_run("run-a")
    assert isinstance(run, RunRow)
    assert run == await journal.get_run("run-a")
