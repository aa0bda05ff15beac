"""
The journal's contract, held by both backends: every test that takes the
``journal`` or ``target`` fixture runs once on SQLite and once on PostgreSQL (a
real server: tests/support/pg.py). Tests of one backend's own matters (SQLite's
file and pragmas, PostgreSQL's schema table and URLs) say so in their names.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.pg import URL_ENV, PgUnavailable, find_binaries, fresh_database, fresh_schema

from proctor._digest import canonical_json
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
    Claimed,
    Journal,
    JournalLike,
    RunRow,
    Synchronous,
    is_postgres_url,
    open_journal,
)
from proctor.runtime._journal import postgres_sql as pg_sql
from proctor.runtime._journal import schema as journal_schema
from proctor.runtime._journal.blobs import BLOB_MIN
from proctor.runtime._journal.postgres import PgJournal
from proctor.runtime._records import (
    Decision,
    Disposition,
    MessageEvent,
    MessageKind,
    StopReason,
    ToolStatus,
    TraceRecord,
)

TASK = "task-1"
RUN_IDS = itertools.count()
# PostgreSQL text cannot hold U+0000 (see test_a_nul_character_in_plain_text); inside
# JSON it is escaped, so only the plain text fields avoid it.
PLAIN_TEXT = st.text(st.characters(blacklist_characters="\x00"))
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)
POLICY: dict[str, Any] = {"stall_threshold": 4}


@attrs.frozen
class Backend:
    """One journal backend under test."""

    name: str
    #: The error a constraint violation is chained to.
    integrity_error: type[Exception]
    #: For PostgreSQL, the URL of the server the tests create schemas on.
    admin_url: str | None = None


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", sqlite3.IntegrityError)
    # Asked for here, not as an argument: SQLite's tests start no server.
    admin_url: str = request.getfixturevalue("pg_url")
    return Backend("postgresql", asyncpg.IntegrityConstraintViolationError, admin_url)


@pytest.fixture
async def target(backend: Backend, tmp_path: Path) -> AsyncIterator[str]:
    """Where a fresh, empty journal of the backend goes: a file, or a URL."""
    if backend.admin_url is None:
        yield str(tmp_path / "proctor.db")
        return
    async with fresh_schema(backend.admin_url) as url:
        yield url


@pytest.fixture
async def journal(target: str) -> AsyncIterator[JournalLike]:
    async with open_journal(target) as j:
        await j.put_task(TASK, "make the tests pass", {"kind": "build"}, "c1")
        yield j


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proctor.db"


@pytest.fixture
async def pg_target(pg_url: str) -> AsyncIterator[str]:
    async with fresh_schema(pg_url) as url:
        yield url


async def connect(target: str, synchronous: Synchronous = "NORMAL") -> JournalLike:
    """Open a journal without a context manager, whichever the backend."""
    if is_postgres_url(target):
        return await PgJournal.open(target, synchronous=synchronous)
    return await Journal.open(target, synchronous=synchronous)


def as_journal_like(journal: Journal | PgJournal) -> JournalLike:
    # mypy checks here that both backends implement the whole interface.
    return journal


async def new_run(j: JournalLike, run_id: str, task_id: str = TASK) -> int:
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


async def dispatch(j: JournalLike, run_id: str, epoch: int, key: str, args_hash: str = "h") -> None:
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


async def end(j: JournalLike, run_id: str, epoch: int, disposition: str = "completed") -> None:
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


async def test_sqlite_open_creates_the_schema_in_wal_mode(db_path: Path) -> None:
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


async def test_sqlite_migrations_are_idempotent(db_path: Path) -> None:
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


async def test_sqlite_journal_of_version_1_gains_the_lease_columns(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.executescript(journal_schema.SQLITE_MIGRATIONS[0].script)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO tasks VALUES ('t', 'goal', '{}', 'c1', 0)")
        conn.execute(
            "INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,"
            " started_at) VALUES ('run-a', 't', 1, 'running', '{}', 'p1', 'h1', 0)"
        )
    conn.close()
    async with open_journal(db_path) as j:
        run = await j.get_run("run-a")
        assert (run.owner, run.lease_until, run.epoch) == (None, None, 1)
        await j.submit_run("run-b", "t", policy={}, policy_version="p1")
        claimed = await j.claim_run("w1", 60)
        assert claimed == Claimed("run-b", "t", 2, 0)
    assert user_version(db_path) == SCHEMA_VERSION


async def test_sqlite_a_newer_schema_is_refused(db_path: Path) -> None:
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


async def test_sqlite_a_file_that_is_not_a_journal_is_a_journal_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database, just words " * 100)
    with pytest.raises(JournalError) as info:
        await Journal.open(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.Error)


async def pg_schema_versions(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT version FROM proctor_schema ORDER BY migrated_at")
    finally:
        await conn.close()
    return [int(row[0]) for row in rows]


async def pg_execute(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def test_postgresql_open_creates_the_schema(pg_target: str) -> None:
    async with open_journal(pg_target) as j:
        assert isinstance(j, PgJournal)
        assert j.path == pg_target
        assert await j.integrity_check() == "ok"
    assert await pg_schema_versions(pg_target) == [SCHEMA_VERSION]
    conn = await asyncpg.connect(pg_target)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    finally:
        await conn.close()
    expected = {"tasks", "runs", "steps", "effects", "evidence", "spend", "processes", "notes"}
    assert expected | {"proctor_schema"} <= {row[0] for row in rows}


async def test_postgresql_migrations_are_idempotent(pg_target: str) -> None:
    async with open_journal(pg_target) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        await new_run(j, "run-a")
    async with open_journal(pg_target) as j:
        assert (await j.get_run("run-a")).epoch == 1
    assert await pg_schema_versions(pg_target) == [SCHEMA_VERSION]
    # Re-running every migration on a current journal is harmless too.
    await pg_execute(pg_target, "DELETE FROM proctor_schema")
    async with open_journal(pg_target) as j:
        assert (await j.get_run("run-a")).goal == "goal"
        assert await j.integrity_check() == "ok"
    assert await pg_schema_versions(pg_target) == [SCHEMA_VERSION]


async def test_postgresql_journal_of_version_1_gains_the_lease_columns(pg_target: str) -> None:
    await pg_execute(
        pg_target,
        pg_sql.Sql.schema_table
        + ";"
        + journal_schema.PG_MIGRATIONS[0]
        + """
        INSERT INTO proctor_schema (version) VALUES (1);
        INSERT INTO tasks VALUES ('t', 'goal', '{}', 'c1', 0);
        INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,
                          started_at)
        VALUES ('run-a', 't', 1, 'running', '{}', 'p1', 'h1', 0);
        """,
    )
    async with open_journal(pg_target) as j:
        run = await j.get_run("run-a")
        assert (run.owner, run.lease_until, run.epoch) == (None, None, 1)
        await j.submit_run("run-b", "t", policy={}, policy_version="p1")
        assert await j.claim_run("w1", 60) == Claimed("run-b", "t", 2, 0)
    assert await pg_schema_versions(pg_target) == [1, SCHEMA_VERSION]


async def test_postgresql_a_newer_schema_is_refused(pg_target: str) -> None:
    async with open_journal(pg_target):
        pass
    await pg_execute(
        pg_target, f"INSERT INTO proctor_schema (version) VALUES ({SCHEMA_VERSION + 1})"
    )
    with pytest.raises(SchemaError) as info:
        await PgJournal.open(pg_target)
    message = str(info.value)
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"up to {SCHEMA_VERSION}" in message
    assert pg_target in message


async def test_postgresql_in_a_database_of_its_own(pg_url: str) -> None:
    # The tables in the database's default schema, as a deployment has them.
    async with fresh_database(pg_url) as url, open_journal(url) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        assert await new_run(j, "run-a") == 1
        assert await j.integrity_check() == "ok"


async def test_postgresql_an_unreachable_server_is_a_journal_error() -> None:
    # Port 1 on the loopback: nothing listens there.
    url = "postgresql://proctor:s3cret@127.0.0.1:1/proctor"
    with pytest.raises(JournalError) as info:
        await PgJournal.open(url)
    message = str(info.value)
    assert "127.0.0.1:1" in message
    assert "s3cret" not in message
    assert isinstance(info.value.__cause__, OSError)


async def test_postgresql_the_password_is_never_shown(pg_target: str) -> None:
    # The test server trusts 127.0.0.1, so any password is accepted.
    url = pg_target.replace("://postgres@", "://postgres:s3cret@", 1)
    async with open_journal(url) as j:
        assert "s3cret" not in j.path
        assert "postgres:***@" in j.path
        with pytest.raises(RunNotFoundError) as info:
            await j.get_run("missing-run")
    assert "s3cret" not in str(info.value)
    with_query = "postgresql://127.0.0.1:1/x?user=postgres&password=s3cret"
    with pytest.raises(JournalError) as error:
        await PgJournal.open(with_query)
    assert "s3cret" not in str(error.value)


def test_open_journal_picks_the_backend_from_the_target(tmp_path: Path) -> None:
    assert is_postgres_url("postgresql://u@h/db")
    assert is_postgres_url("postgres://u@h/db")
    assert is_postgres_url("PostgreSQL://u@h/db")
    assert not is_postgres_url(tmp_path / "postgresql.db")
    assert not is_postgres_url("proctor.db")


async def test_the_backend_of_open_journal(target: str, backend: Backend) -> None:
    async with open_journal(target) as j:
        expected = PgJournal if backend.name == "postgresql" else Journal
        assert type(j) is expected
        assert as_journal_like(j) is j


async def test_a_bad_synchronous_level_is_refused(target: str) -> None:
    with pytest.raises(ConfigError, match="NORMAL"):
        await connect(target, synchronous="SOMETIMES")  # type: ignore[arg-type]


async def test_reopened_journal_keeps_its_data(target: str) -> None:
    j = await connect(target)
    async with j:
        await j.put_task(TASK, "goal", {"a": 1}, "c1")
        epoch = await new_run(j, "run-a")
        await j.append_step("run-a", epoch, step("run-a", 1))
    await j.close()  # closing twice is fine
    with pytest.raises(JournalError, match="closed"):
        await j.steps("run-a")
    async with await connect(target) as again:
        assert [s["step"] for s in await again.steps("run-a")] == [1]
        assert (await again.get_task(TASK))["spec"] == {"a": 1}


async def test_a_second_connection_sees_committed_data(journal: JournalLike, target: str) -> None:
    epoch = await new_run(journal, "run-a")
    await journal.append_step("run-a", epoch, step("run-a", 1))
    await dispatch(journal, "run-a", epoch, "k1")
    async with open_journal(target) as other:
        assert len(await other.steps("run-a")) == 1
        assert [e.key for e in await other.effects(run_id="run-a")] == ["k1"]
        # And the other way round: the second connection writes, the first reads.
        await other.add_note("run-a", "amendment", {"why": "typo"})
    assert [n["body"] for n in await journal.notes("run-a")] == [{"why": "typo"}]


# -- tasks and runs ------------------------------------------------------------------


async def test_put_task_updates_spec_and_contract(journal: JournalLike) -> None:
    await journal.put_task(TASK, "another goal", {"kind": "answer"}, "c2")
    task = await journal.get_task(TASK)
    assert task["goal"] == "make the tests pass"
    assert task["spec"] == {"kind": "answer"}
    assert task["contract_version"] == "c2"
    with pytest.raises(JournalError, match="no task"):
        await journal.get_task("nope")


async def test_epochs_increment_per_task(journal: JournalLike) -> None:
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


async def test_create_run_errors(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    with pytest.raises(JournalError, match="already exists"):
        await new_run(journal, "run-a")
    with pytest.raises(JournalError, match="not in the journal"):
        await new_run(journal, "run-b", task_id="unknown-task")


async def test_get_run_reads_back_everything(journal: JournalLike) -> None:
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


async def test_list_runs_newest_first(journal: JournalLike) -> None:
    for name in ("run-a", "run-b", "run-c"):
        await new_run(journal, name)
    assert [r.run_id for r in await journal.list_runs()] == ["run-c", "run-b", "run-a"]
    assert [r.run_id for r in await journal.list_runs(limit=1)] == ["run-c"]


async def test_run_prefix_lookup(journal: JournalLike) -> None:
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


async def test_run_prefix_whose_successor_cannot_be_spelled(journal: JournalLike) -> None:
    await new_run(journal, "run-a\U0010ffff-tail")
    await new_run(journal, "run-b\U0010ffff-tail")
    assert (await journal.get_run("run-a\U0010ffff")).run_id == "run-a\U0010ffff-tail"


async def test_unknown_run(journal: JournalLike) -> None:
    with pytest.raises(RunNotFoundError, match="no run 'missing-run'"):
        await journal.get_run("missing-run")
    with pytest.raises(RunNotFoundError):
        await journal.append_step("missing-run", 1, step("missing-run", 1))
    with pytest.raises(RunNotFoundError):
        await end(journal, "missing-run", 1)
    with pytest.raises(RunNotFoundError):
        await dispatch(journal, "missing-run", 1, "k")


async def test_end_run_is_fenced(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    with pytest.raises(FencedError, match="epoch"):
        await end(journal, "run-a", epoch + 1)
    assert (await journal.get_run("run-a")).status == "running"
    await end(journal, "run-a", epoch)
    with pytest.raises(FencedError, match="ended"):
        await end(journal, "run-a", epoch, "failed")
    assert (await journal.get_run("run-a")).status == "completed"


async def test_end_run_rejects_non_terminal_dispositions(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    with pytest.raises(ConfigError, match="completed"):
        await end(journal, "run-a", epoch, "continue")


@pytest.mark.parametrize("level", ["OFF", "FULL"])
async def test_durable_writes_whatever_the_level(target: str, level: Synchronous) -> None:
    async with open_journal(target, synchronous=level) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        epoch = await new_run(j, "run-a")
        await dispatch(j, "run-a", epoch, "k1")
        await j.append_step("run-a", epoch, step("run-a", 1))
        await end(j, "run-a", epoch)
        await j.submit_run("run-b", TASK, policy=POLICY, policy_version="p1")
        assert await j.claim_run("w1", 60) == Claimed("run-b", TASK, 2, 0)
        assert (await j.get_run("run-a")).status == "completed"


async def test_concurrent_runs_of_one_task_get_distinct_epochs(target: str) -> None:
    # Each creator has its own connection; on PostgreSQL two of them may compute
    # the same next epoch, and the loser tries again.
    async with open_journal(target) as first:
        await first.put_task(TASK, "goal", {}, "c1")
    epochs: list[int] = []

    async def create(n: int) -> None:
        async with open_journal(target) as j:
            epochs.append(await new_run(j, f"run-{n}"))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(create, n)
    assert sorted(epochs) == list(range(1, 9))


# -- steps ---------------------------------------------------------------------------


async def test_steps_round_trip(journal: JournalLike) -> None:
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
            event=MessageEvent(kind=MessageKind.FINAL_ANSWER, text="done"),
        )
    )
    records = [step("run-a", 1), step("run-a", 2), last]
    await journal.append_step("run-a", epoch, records[0])
    await journal.append_steps("run-a", epoch, records[1:])
    assert await journal.steps("run-a") == records
    assert (await journal.steps("run-a"))[0]["progress"] is True
    assert await journal.steps("other-run") == []


async def test_fields_without_a_column_are_kept(journal: JournalLike) -> None:
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
    reason=PLAIN_TEXT,
)
async def test_steps_round_trip_any_json(
    journal: JournalLike, state_delta: dict[str, Any], remaining: dict[str, float], reason: str
) -> None:
    run_id = f"run-{next(RUN_IDS)}"
    epoch = await new_run(journal, run_id)
    record = step(run_id, 1, state_delta=state_delta, remaining=remaining, reason=reason)
    await journal.append_step(run_id, epoch, record)
    # JSON keeps any text exactly; a plain text column holds valid Unicode only, so a
    # lone surrogate in the reason is stored as U+FFFD.
    valid = reason.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    assert await journal.steps(run_id) == [{**record, "reason": valid}]


async def test_a_duplicate_step_is_an_error(journal: JournalLike, backend: Backend) -> None:
    epoch = await new_run(journal, "run-a")
    await journal.append_step("run-a", epoch, step("run-a", 1))
    with pytest.raises(JournalError, match="already journaled") as info:
        await journal.append_step("run-a", epoch, step("run-a", 1, reason="again"))
    assert not isinstance(info.value, FencedError)
    assert isinstance(info.value.__cause__, backend.integrity_error)
    assert str(journal.path) in str(info.value)
    # A batch with a duplicate writes none of its steps.
    with pytest.raises(JournalError, match="already journaled"):
        await journal.append_steps("run-a", epoch, [step("run-a", 2), step("run-a", 1)])
    assert [s["reason"] for s in await journal.steps("run-a")] == ["new file content"]


async def test_steps_are_fenced_by_epoch_not_status(journal: JournalLike) -> None:
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


async def test_a_cancelled_batch_is_all_or_nothing(journal: JournalLike) -> None:
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


async def test_a_nul_character_in_plain_text(journal: JournalLike, backend: Backend) -> None:
    epoch = await new_run(journal, "run-a")
    # Inside JSON fields it is escaped, on both backends.
    first = step("run-a", 1, state_delta={"out": "a\x00b"}, annotations={"x\x00": "\x00"})
    await journal.append_step("run-a", epoch, first)
    second = step("run-a", 2, reason="nul \x00 here")
    if backend.name == "sqlite":
        await journal.append_step("run-a", epoch, second)
        assert await journal.steps("run-a") == [first, second]
        return
    # PostgreSQL text cannot hold it: refused, nothing written, and said so.
    with pytest.raises(JournalError, match="U\\+0000"):
        await journal.append_step("run-a", epoch, second)
    assert await journal.steps("run-a") == [first]


async def test_malformed_step_records(journal: JournalLike) -> None:
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


async def test_dispatch_is_refused_after_the_run_ended(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    await end(journal, "run-a", epoch)
    with pytest.raises(FencedError, match="ended"):
        await dispatch(journal, "run-a", epoch, "k1")
    assert await journal.effects() == []


async def test_dispatch_is_refused_under_a_stale_epoch(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    epoch = await new_run(journal, "run-b")
    with pytest.raises(FencedError, match="epoch"):
        await dispatch(journal, "run-b", epoch - 1, "k1")
    with pytest.raises(FencedError):
        # run-a's own epoch is 1, but a fresh key is still fenced for another epoch.
        await dispatch(journal, "run-a", epoch, "k2")
    assert await journal.effects() == []


async def test_a_key_reused_with_other_arguments(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    await dispatch(journal, "run-a", epoch, "k1", args_hash="h1")
    with pytest.raises(EffectError, match="k1 reused with other arguments"):
        await dispatch(journal, "run-a", epoch, "k1", args_hash="h2")
    [effect] = await journal.effects()
    assert effect.args_hash == "h1"


async def test_a_retry_with_the_same_arguments_dispatches_again(journal: JournalLike) -> None:
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


async def test_effects_settle_and_filter(journal: JournalLike) -> None:
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


async def test_evidence(journal: JournalLike) -> None:
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


async def test_spend_totals(journal: JournalLike) -> None:
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


async def test_deferred_spend_is_written_with_the_next_operation(target: str) -> None:
    async with open_journal(target) as j, open_journal(target) as other:
        await j.put_task(TASK, "goal", {}, "c1")
        epoch = await new_run(j, "run-a")
        await j.add_spend(TASK, "run-a", {"steps": 1.0}, "reserve", defer=True)
        await j.add_spend(TASK, "run-a", {"steps": 1.0, "wall_seconds": 0.5}, "settle", defer=True)
        # Not yet in the journal for anyone else...
        assert await other.spend_totals(TASK, kinds=["settle", "reserve"]) == {}
        # ...written in the step's transaction, before the step.
        await j.append_step("run-a", epoch, step("run-a", 1))
        assert await other.spend_totals(TASK) == {"steps": 1.0, "wall_seconds": 0.5}
        assert await other.spend_totals(TASK, kinds=["reserve"]) == {"steps": 1.0}
        # A read of the same journal sees what it deferred.
        await j.add_spend(TASK, "run-a", {"steps": 1.0}, "settle", defer=True)
        assert await j.spend_totals(TASK) == {"steps": 2.0, "wall_seconds": 0.5}
        # An effect's durable dispatch carries them too.
        await j.add_spend(TASK, "run-a", {"tool_calls": 1.0}, "settle", defer=True)
        await dispatch(j, "run-a", epoch, "k1")
        assert (await other.spend_totals(TASK))["tool_calls"] == 1.0
        # And closing the journal writes what is left.
        await j.add_spend(TASK, "run-a", {"steps": 1.0}, "settle", defer=True)
    async with open_journal(target) as again:
        assert await again.spend_totals(TASK) == {
            "steps": 3.0,
            "tool_calls": 1.0,
            "wall_seconds": 0.5,
        }


async def test_deferred_spend_survives_a_refused_step(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    await journal.append_step("run-a", epoch, step("run-a", 1))
    await journal.add_spend(TASK, "run-a", {"steps": 1.0}, "settle", defer=True)
    with pytest.raises(JournalError, match="already journaled"):
        await journal.append_step("run-a", epoch, step("run-a", 1))
    await journal.add_spend(TASK, "run-a", {"steps": 1.0}, "settle", defer=True)
    with pytest.raises(FencedError):
        await journal.append_step("run-a", epoch + 1, step("run-a", 2))
    # Spend is spent, whatever became of the step it came with: written once each.
    assert await journal.spend_totals(TASK) == {"steps": 2.0}


async def test_concurrent_steps_of_many_runs_each_get_their_own_outcome(
    journal: JournalLike,
) -> None:
    # On SQLite the steps waiting for the connection are committed together:
    # one run's refusal must not undo, or be charged to, another's step.
    epochs = {f"run-{i}": await new_run(journal, f"run-{i}") for i in range(6)}
    await journal.append_step("run-0", epochs["run-0"], step("run-0", 1))
    outcomes: dict[str, str] = {}

    async def write(run_id: str, n: int, epoch: int) -> None:
        try:
            await journal.append_step(run_id, epoch, step(run_id, n))
            outcomes[f"{run_id}/{n}"] = "written"
        except FencedError:
            outcomes[f"{run_id}/{n}"] = "fenced"
        except RunNotFoundError:
            outcomes[f"{run_id}/{n}"] = "no run"
        except JournalError:
            outcomes[f"{run_id}/{n}"] = "duplicate"

    async with anyio.create_task_group() as tg:
        tg.start_soon(write, "run-0", 1, epochs["run-0"])
        for i in range(1, 6):
            tg.start_soon(write, f"run-{i}", 1, epochs[f"run-{i}"])
            tg.start_soon(write, f"run-{i}", 2, epochs[f"run-{i}"])
        tg.start_soon(write, "run-3", 3, epochs["run-3"] + 1)
        tg.start_soon(write, "run-9", 1, 1)
    expected = {f"run-{i}/{n}": "written" for i in range(1, 6) for n in (1, 2)}
    expected |= {"run-0/1": "duplicate", "run-3/3": "fenced", "run-9/1": "no run"}
    assert outcomes == expected
    for i in range(1, 6):
        assert [s["step"] for s in await journal.steps(f"run-{i}")] == [1, 2]
    assert [s["step"] for s in await journal.steps("run-0")] == [1]


async def test_steps_after_a_step_and_the_ending_step(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    assert await journal.ending_step("run-a") is None
    await journal.append_steps("run-a", epoch, [step("run-a", n) for n in (1, 2, 3)])
    assert [s["step"] for s in await journal.steps("run-a", after=1)] == [2, 3]
    assert await journal.steps("run-a", after=3) == []
    assert await journal.ending_step("run-a") is None
    ended = step("run-a", 4, disposition="completed", stop_reason={"code": "checks_passed"})
    # A refusal after the end still carries the disposition: the last such step is it.
    await journal.append_steps("run-a", epoch, [ended, step("run-a", 5)])
    found = await journal.ending_step("run-a")
    assert found is not None
    assert (found["step"], found["disposition"]) == (4, "completed")
    assert found == (await journal.steps("run-a", after=3))[0]


async def test_notes_of_some_kinds(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    for kind in ("start", "amend", "effect", "amend", "retune-request"):
        await journal.add_note("run-a", kind, {"kind": kind})
    amends = await journal.notes("run-a", kinds=("amend", "retune-request"))
    assert [n["kind"] for n in amends] == ["amend", "amend", "retune-request"]
    after = amends[0]["id"]
    assert [n["kind"] for n in await journal.notes("run-a", after=after, kinds=["amend"])] == [
        "amend"
    ]
    assert await journal.notes("run-a", kinds=()) == []


async def test_a_snapshot_replaces_the_runs_last(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    await new_run(journal, "run-b")
    assert await journal.snapshot("run-a") is None
    await journal.put_snapshot("run-a", 5, {"step": 5, "state": [1, 2]})
    await journal.put_snapshot("run-b", 7, {"step": 7})
    await journal.put_snapshot("run-a", 10, {"step": 10, "é": None})
    assert await journal.snapshot("run-a") == {"step": 10, "é": None}
    assert await journal.snapshot("run-b") == {"step": 7}
    assert await journal.notes("run-a") == []


async def test_append_step_returns_the_runs_newest_note(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    await new_run(journal, "run-b")
    assert await journal.append_step("run-a", epoch, step("run-a", 1)) == 0
    await journal.add_note("run-a", "amend", {"who": "ops"})
    await journal.add_note("run-b", "amend", {"who": "ops"})
    newest = max(n["id"] for n in await journal.notes("run-a"))
    assert await journal.append_step("run-a", epoch, step("run-a", 2)) == newest
    assert await journal.notes("run-a", after=newest) == []


async def test_processes(journal: JournalLike) -> None:
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


async def test_a_deferred_process_end_is_written_with_the_next_operation(target: str) -> None:
    async with open_journal(target) as j, open_journal(target) as other:
        await j.put_task(TASK, "goal", {}, "c1")
        epoch = await new_run(j, "run-a")
        await j.record_process("run-a", 4242, "pytest -q")
        await j.end_process("run-a", 4242, "exited", defer=True)
        # Not yet in the journal for anyone else: the group is still open there...
        assert [p.how for p in await other.processes("run-a")] == [None]
        # ...and ended in the step's transaction.
        await j.append_step("run-a", epoch, step("run-a", 1))
        [ended] = await other.processes("run-a")
        assert (ended.how, ended.ended_at is not None) == ("exited", True)
        # In order: an end deferred before its pgid is taken again ends the old record.
        await j.record_process("run-a", 4343, "make")
        await j.end_process("run-a", 4343, "killed", defer=True)
        await j.record_process("run-a", 4343, "make again")
        assert [(p.command, p.how) for p in await other.processes("run-a")] == [
            ("pytest -q", "exited"),
            ("make", "killed"),
            ("make again", None),
        ]
        # Closing the journal writes what is left.
        await j.end_process("run-a", 4343, "terminated", defer=True)
    async with open_journal(target) as again:
        assert [p.how for p in await again.processes("run-a")] == ["exited", "killed", "terminated"]


async def test_notes(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    await journal.add_note("run-a", "amendment", {"contract_version": "c2"})
    await journal.add_note("run-a", "retune", {"stall_threshold": 6})
    notes = await journal.notes("run-a")
    assert [(n["run_id"], n["kind"], n["body"]) for n in notes] == [
        ("run-a", "amendment", {"contract_version": "c2"}),
        ("run-a", "retune", {"stall_threshold": 6}),
    ]
    assert await journal.notes("run-b") == []


async def test_writes_for_unknown_runs_are_journal_errors(
    journal: JournalLike, backend: Backend
) -> None:
    with pytest.raises(JournalError, match=r"(?i)foreign key") as info:
        await journal.add_note("no-such-run", "x", {})
    assert isinstance(info.value.__cause__, backend.integrity_error)


async def test_run_rows_are_plain_records(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    run = await journal.get_run("run-a")
    assert isinstance(run, RunRow)
    assert run == await journal.get_run("run-a")


async def test_settle_effect_fenced_by_the_writers_epoch(journal: JournalLike) -> None:
    epoch_a = await new_run(journal, "run-a")
    await dispatch(journal, "run-a", epoch_a, "k1")
    with pytest.raises(FencedError, match="epoch"):
        await journal.settle_effect("k1", "confirmed", None, run_id="run-a", epoch=epoch_a + 1)
    with pytest.raises(RunNotFoundError):
        await journal.settle_effect("k1", "confirmed", None, run_id="no-run", epoch=1)
    with pytest.raises(ConfigError, match="both"):
        await journal.settle_effect("k1", "confirmed", None, run_id="run-a")
    with pytest.raises(EffectError, match="nope"):
        await journal.settle_effect("nope", "confirmed", None, run_id="run-a", epoch=epoch_a)
    [effect] = await journal.effects()
    assert effect.state == "dispatched"
    # Open dispatches are marked after the end: the fence is the epoch, not the status.
    await end(journal, "run-a", epoch_a, "stopped")
    await journal.settle_effect("k1", "uncertain", {"why": "ended"}, run_id="run-a", epoch=epoch_a)
    # A resumed run settles an earlier run's effect under its own epoch.
    epoch_b = await new_run(journal, "run-b")
    await journal.settle_effect(
        "k1", "reconciled_applied", {"read": "ok"}, run_id="run-b", epoch=epoch_b
    )
    [effect] = await journal.effects()
    assert (effect.state, effect.outcome) == ("reconciled_applied", {"read": "ok"})


# -- leases --------------------------------------------------------------------------


async def submit(j: JournalLike, run_id: str, task_id: str = TASK) -> None:
    await j.submit_run(run_id, task_id, policy=POLICY, policy_version="p1")


async def test_a_submitted_run_is_queued_until_claimed(journal: JournalLike) -> None:
    await submit(journal, "run-a")
    run = await journal.get_run("run-a")
    assert (run.status, run.epoch, run.owner, run.lease_until) == ("queued", 0, None, None)
    assert run.policy == POLICY
    claimed = await journal.claim_run("worker-1", 60)
    assert claimed == Claimed(run_id="run-a", task_id=TASK, epoch=1, previous_epoch=0)
    run = await journal.get_run("run-a")
    assert (run.status, run.epoch, run.owner, run.host) == ("running", 1, "worker-1", "worker-1")
    assert run.lease_until is not None
    # Its lease is live: nobody else gets it.
    assert await journal.claim_run("worker-2", 60) is None


async def test_claims_take_the_oldest_run_first(journal: JournalLike) -> None:
    for n in range(3):
        await journal.put_task(f"task-{n}", "goal", {}, "c1")
        await submit(journal, f"run-{n}", f"task-{n}")
    claimed = [await journal.claim_run("w", 60) for _ in range(4)]
    assert [c.run_id if c else None for c in claimed] == ["run-0", "run-1", "run-2", None]


async def test_two_claimers_never_claim_the_same_run(target: str) -> None:
    runs = 20
    async with open_journal(target) as setup:
        for n in range(runs):
            await setup.put_task(f"task-{n}", "goal", {}, "c1")
            await submit(setup, f"run-{n:02}", f"task-{n}")
    claims: dict[str, list[Claimed]] = {"w1": [], "w2": []}

    async def claimer(worker: str) -> None:
        # Each claimer is its own journal: its own connection(s), as on two hosts.
        async with open_journal(target) as j:
            while (claimed := await j.claim_run(worker, 3600)) is not None:
                claims[worker].append(claimed)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(claimer, "w1")
            tg.start_soon(claimer, "w2")
    got = [c.run_id for c in claims["w1"] + claims["w2"]]
    assert sorted(got) == [f"run-{n:02}" for n in range(runs)]
    assert all(c.epoch == 1 and c.previous_epoch == 0 for c in claims["w1"] + claims["w2"])
    async with open_journal(target) as check:
        owners = {r.run_id: r.owner for r in await check.list_runs(limit=runs)}
    for worker, mine in claims.items():
        assert all(owners[c.run_id] == worker for c in mine)


async def test_an_expired_lease_is_taken_over_and_the_old_owner_fenced(
    journal: JournalLike,
) -> None:
    await submit(journal, "run-a")
    # A lease of 0 seconds has expired by the next statement.
    old = await journal.claim_run("worker-1", 0)
    assert old is not None
    await journal.append_step("run-a", old.epoch, step("run-a", 1))
    await dispatch(journal, "run-a", old.epoch, "k1")

    new = await journal.claim_run("worker-2", 3600)
    assert new == Claimed("run-a", TASK, old.epoch + 1, old.epoch)
    assert (await journal.get_run("run-a")).owner == "worker-2"

    # Every fenced write of the old owner is refused, and writes nothing.
    with pytest.raises(FencedError, match="epoch"):
        await journal.append_step("run-a", old.epoch, step("run-a", 2))
    with pytest.raises(FencedError, match="epoch"):
        await journal.append_steps("run-a", old.epoch, [step("run-a", 2)])
    with pytest.raises(FencedError, match="epoch"):
        await dispatch(journal, "run-a", old.epoch, "k2")
    with pytest.raises(FencedError, match="epoch"):
        await journal.settle_effect("k1", "confirmed", None, run_id="run-a", epoch=old.epoch)
    with pytest.raises(FencedError, match="epoch"):
        await end(journal, "run-a", old.epoch)
    assert not await journal.renew_lease("run-a", old.epoch, 3600)
    await journal.release_run("run-a", old.epoch)  # the lease was lost already: nothing
    run = await journal.get_run("run-a")
    assert (run.status, run.epoch, run.owner, run.steps) == ("running", new.epoch, "worker-2", 1)
    assert [(e.key, e.state) for e in await journal.effects()] == [("k1", "dispatched")]

    # The new owner goes on where the old one stopped.
    await journal.append_step("run-a", new.epoch, step("run-a", 2))
    await journal.settle_effect("k1", "uncertain", None, run_id="run-a", epoch=new.epoch)
    await end(journal, "run-a", new.epoch)
    assert (await journal.get_run("run-a")).status == "completed"


async def test_renewing_and_releasing_a_lease(journal: JournalLike) -> None:
    await submit(journal, "run-a")
    claimed = await journal.claim_run("worker-1", 60)
    assert claimed is not None
    first = (await journal.get_run("run-a")).lease_until
    assert await journal.renew_lease("run-a", claimed.epoch, 3600)
    renewed = (await journal.get_run("run-a")).lease_until
    assert first is not None
    assert renewed is not None
    assert renewed > first
    assert await journal.claim_run("worker-2", 60) is None

    # Released while running: claimable at once, as a takeover.
    await journal.release_run("run-a", claimed.epoch)
    run = await journal.get_run("run-a")
    assert (run.status, run.owner) == ("running", None)
    again = await journal.claim_run("worker-2", 60)
    assert again == Claimed("run-a", TASK, claimed.epoch + 1, claimed.epoch)

    # Released after the end: no lease is left, and nothing to claim.
    await end(journal, "run-a", again.epoch)
    await journal.release_run("run-a", again.epoch)
    run = await journal.get_run("run-a")
    assert (run.status, run.owner, run.lease_until) == ("completed", None, None)
    assert not await journal.renew_lease("run-a", again.epoch, 60)
    assert await journal.claim_run("worker-3", 60) is None


async def test_runs_without_a_lease_are_never_claimed(journal: JournalLike) -> None:
    # A run created directly is owned by its host, lease or no lease.
    epoch = await new_run(journal, "run-a")
    assert await journal.claim_run("worker-1", 60) is None
    await end(journal, "run-a", epoch)
    assert await journal.claim_run("worker-1", 60) is None


async def test_a_claim_takes_an_epoch_above_every_run_of_the_task(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-a")
    await end(journal, "run-a", epoch, "stopped")
    await submit(journal, "run-b")
    assert await journal.claim_run("w", 60) == Claimed("run-b", TASK, epoch + 1, 0)
    # And a run created after it is above it in turn.
    assert await new_run(journal, "run-c") == epoch + 2


async def test_a_queued_run_takes_no_writes(journal: JournalLike) -> None:
    await submit(journal, "run-a")
    with pytest.raises(FencedError, match="queued"):
        await journal.append_step("run-a", 0, step("run-a", 1))
    with pytest.raises(FencedError, match="queued"):
        await journal.append_steps("run-a", 0, [step("run-a", 1)])
    with pytest.raises(FencedError, match="queued"):
        await dispatch(journal, "run-a", 0, "k1")
    with pytest.raises(FencedError, match="queued"):
        await end(journal, "run-a", 0)
    assert not await journal.renew_lease("run-a", 0, 60)
    await journal.release_run("run-a", 0)
    run = await journal.get_run("run-a")
    assert (run.status, run.steps, run.epoch) == ("queued", 0, 0)


async def test_submit_run_errors(journal: JournalLike) -> None:
    await submit(journal, "run-a")
    with pytest.raises(JournalError, match="already exists"):
        await submit(journal, "run-a")
    with pytest.raises(JournalError, match="not in the journal"):
        await submit(journal, "run-x", "unknown-task")
    with pytest.raises(JournalError, match="already has a queued run"):
        await submit(journal, "run-b")
    # Once claimed, the task may queue another.
    assert await journal.claim_run("w", 60) is not None
    await submit(journal, "run-b")


async def test_lease_argument_errors(journal: JournalLike) -> None:
    await submit(journal, "run-a")
    with pytest.raises(ConfigError, match="worker"):
        await journal.claim_run("", 60)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ConfigError, match="finite, non-negative"):
            await journal.claim_run("w", bad)
    claimed = await journal.claim_run("w", 60)
    assert claimed is not None
    with pytest.raises(ConfigError, match="finite, non-negative"):
        await journal.renew_lease("run-a", claimed.epoch, -5)
    with pytest.raises(RunNotFoundError):
        await journal.renew_lease("no-such-run", 1, 60)
    with pytest.raises(RunNotFoundError):
        await journal.release_run("no-such-run", 1)


async def test_postgresql_a_write_racing_a_claim_waits_for_it_and_is_fenced(
    pg_target: str,
) -> None:
    async with open_journal(pg_target) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        await submit(j, "run-a")
        old = await j.claim_run("worker-1", 0)
        assert old is not None
        claimer = await asyncpg.connect(pg_target)
        try:
            # A takeover in flight: the run's row is updated, not yet committed.
            claim = claimer.transaction()
            await claim.start()
            await claimer.execute(
                "UPDATE runs SET epoch = epoch + 1, owner = 'worker-2' WHERE run_id = 'run-a'"
            )
            outcome: list[str] = []

            async def write() -> None:
                try:
                    await j.append_step("run-a", old.epoch, step("run-a", 1))
                    outcome.append("written")
                except FencedError:
                    outcome.append("fenced")

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(write)

                    # The write's fence waits on the run's row lock. That state is
                    # in the server, with nothing to wait on but asking it. Inside a
                    # transaction the activity view is a snapshot: clear it each time.
                    async def waiting() -> bool:
                        await claimer.execute("SELECT pg_stat_clear_snapshot()")
                        return bool(
                            await claimer.fetchval(
                                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                                "= 'Lock' AND query LIKE '%INSERT INTO steps%'"
                            )
                        )

                    while not await waiting():  # noqa: ASYNC110
                        await anyio.sleep(0.005)
                    assert outcome == []
                    await claim.commit()
        finally:
            await claimer.close()
        assert outcome == ["fenced"]
        assert await j.steps("run-a") == []


def test_missing_postgresql_binaries_say_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "15" / "bin").mkdir(parents=True)
    (tmp_path / "15" / "bin" / "psql").touch()
    with pytest.raises(PgUnavailable) as info:
        find_binaries(tmp_path, use_path=False)
    message = str(info.value)
    assert "apt-get install postgresql-15" in message
    assert URL_ENV in message
    assert str(tmp_path / "15" / "bin") in message


async def test_a_postgresql_url_without_asyncpg_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if asyncpg were not installed: importing it fails.
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    monkeypatch.delitem(sys.modules, "proctor.runtime._journal.postgres")
    with pytest.raises(ConfigError, match=r"pip install 'proctor\[postgresql\]'"):
        async with open_journal("postgresql://u@127.0.0.1:1/db"):
            pass


# -- holders: one live host per task ------------------------------------------------------


async def test_a_task_is_held_by_one_holder_at_a_time(journal: JournalLike) -> None:
    assert await journal.task_holder(TASK) is None
    assert await journal.hold_task(TASK, "run-a", "h1:1:10:run-a") is None
    held = await journal.task_holder(TASK)
    assert held is not None
    assert (held.task_id, held.run_id, held.holder) == (TASK, "run-a", "h1:1:10:run-a")
    # A second holder is told who holds it, and holds nothing.
    refused = await journal.hold_task(TASK, "run-b", "h2:2:20:run-b")
    assert refused is not None
    assert (refused.run_id, refused.holder) == ("run-a", "h1:1:10:run-a")
    # Replacing a holder other than the one that holds it takes nothing either.
    wrong = await journal.hold_task(TASK, "run-b", "h2:2:20:run-b", replacing="h9:9:9:x")
    assert wrong is not None
    assert wrong.holder == "h1:1:10:run-a"
    # A release by someone else lets nothing go.
    await journal.release_task(TASK, "h2:2:20:run-b")
    assert (await journal.task_holder(TASK)) == held


async def test_a_dead_holder_is_replaced_by_name_and_a_release_frees_the_task(
    journal: JournalLike,
) -> None:
    assert await journal.hold_task(TASK, "run-a", "h1:1:10:run-a") is None
    assert (
        await journal.hold_task(TASK, "run-b", "h2:2:20:run-b", replacing="h1:1:10:run-a") is None
    )
    held = await journal.task_holder(TASK)
    assert held is not None
    assert (held.run_id, held.holder) == ("run-b", "h2:2:20:run-b")
    await journal.release_task(TASK, "h2:2:20:run-b")
    assert await journal.task_holder(TASK) is None
    assert await journal.hold_task(TASK, "run-c", "h3:3:30:run-c") is None


async def test_a_task_not_in_the_journal_cannot_be_held(journal: JournalLike) -> None:
    with pytest.raises(JournalError, match="not in the journal"):
        await journal.hold_task("no-such-task", "run-a", "h1:1:10:run-a")


async def test_two_journals_racing_for_one_task_give_it_to_one(target: str) -> None:
    async with open_journal(target) as setup:
        await setup.put_task(TASK, "g", {"kind": "build"}, "c1")
    outcomes: list[object] = []

    async def take(n: int) -> None:
        async with open_journal(target) as j:
            outcomes.append(await j.hold_task(TASK, f"run-{n}", f"h{n}:{n}:{n}:run-{n}"))

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(take, n)
    assert sum(o is None for o in outcomes) == 1


# -- corrupted rows ---------------------------------------------------------------------------


async def _corrupt(target: str, sql: str) -> None:
    if is_postgres_url(target):
        await pg_execute(target, sql)
        return
    with sqlite3.connect(target) as conn:
        conn.execute(sql)


@pytest.mark.parametrize(
    "change",
    [
        "reason = 'new file contenT'",  # a flipped bit that is still text
        "state_version = 4",
        "progress = NOT progress",
        'state_delta = \'{"files": ["a.py"\'',  # no longer JSON
        "remaining = '[1]'",
        "at = CAST('p1-x' AS BLOB)",  # found by benchmarks/fuzz.py: another type
    ],
)
async def test_a_corrupted_step_row_is_reported_with_its_run_and_step(
    journal: JournalLike, target: str, change: str
) -> None:
    epoch = await new_run(journal, "run-x")
    for n in (1, 2, 3):
        await journal.append_step("run-x", epoch, step("run-x", n))
    assert len(await journal.steps("run-x")) == 3
    if "progress" in change and not is_postgres_url(target):
        change = "progress = 1 - progress"
    if "BLOB" in change and is_postgres_url(target):
        change = "at = at + 1"
    await _corrupt(target, f"UPDATE steps SET {change} WHERE run_id = 'run-x' AND step = 2")
    with pytest.raises(JournalError, match="step 2 of run run-x is corrupt"):
        await journal.steps("run-x")
    # The rows before it still read; the corrupt one never reads as data.
    assert [s["step"] for s in await journal.steps("run-x", after=2)] == [3]


async def test_a_step_row_keeps_its_extra_fields_and_no_checksum_shows(
    journal: JournalLike,
) -> None:
    epoch = await new_run(journal, "run-y")
    await journal.append_step("run-y", epoch, step("run-y", 1, future_field={"x": 1}))
    (read,) = await journal.steps("run-y")
    assert read["future_field"] == {"x": 1}
    assert not any(key.startswith("_") for key in read)


async def test_a_corrupted_note_or_run_row_is_a_journal_error(
    journal: JournalLike, target: str
) -> None:
    await new_run(journal, "run-z")
    await journal.add_note("run-z", "start", {"digest": "d"})
    await _corrupt(target, "UPDATE notes SET body = '{\"digest\": ' WHERE run_id = 'run-z'")
    with pytest.raises(JournalError, match=r"note \d+ of run run-z is corrupt"):
        await journal.notes("run-z")
    await _corrupt(target, "UPDATE runs SET policy = 'x' WHERE run_id = 'run-z'")
    with pytest.raises(JournalError, match="run run-z is corrupt"):
        await journal.get_run("run-z")


async def test_sqlite_a_damaged_schema_in_bytes_that_are_not_utf8_is_a_journal_error(
    db_path: Path,
) -> None:
    # Found by benchmarks/fuzz.py: SQLite's message quoting the damaged schema
    # came out as a UnicodeDecodeError.
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = CAST(X'4352454154452054414242b04c452074287829'"
            " AS TEXT) WHERE name = 't'"
        )
    with pytest.raises(JournalError, match="the file is damaged"):
        async with open_journal(db_path):
            pass


# -- liveness ----------------------------------------------------------------------------


async def test_a_heartbeat_records_pid_workspace_and_what_the_run_waits_for(
    journal: JournalLike,
) -> None:
    epoch = await new_run(journal, "run-a")
    fresh = await journal.get_run("run-a")
    assert (fresh.pid, fresh.heartbeat_at, fresh.waiting, fresh.workspace) == (
        None,
        None,
        None,
        None,
    )
    assert await journal.heartbeat("run-a", epoch, pid=4242, workspace="/w", every=0.5)
    run = await journal.get_run("run-a")
    assert (run.pid, run.workspace, run.heartbeat_every, run.waiting) == (4242, "/w", 0.5, None)
    assert run.heartbeat_at is not None
    # What is not given is kept; a wait records since when, and keeps it while it lasts.
    assert await journal.heartbeat("run-a", epoch, waiting="answer")
    waiting = await journal.get_run("run-a")
    assert (waiting.pid, waiting.workspace, waiting.waiting) == (4242, "/w", "answer")
    assert waiting.waiting_since is not None
    assert await journal.heartbeat("run-a", epoch, waiting="answer")
    assert (await journal.get_run("run-a")).waiting_since == waiting.waiting_since
    assert await journal.heartbeat("run-a", epoch)
    assert (await journal.get_run("run-a")).waiting is None
    # Fenced: another epoch, or an ended run, changes nothing.
    assert not await journal.heartbeat("run-a", epoch + 1, waiting="approval")
    await end(journal, "run-a", epoch)
    assert not await journal.heartbeat("run-a", epoch, waiting="approval")
    assert (await journal.get_run("run-a")).waiting is None


async def test_live_runs_are_the_running_ones_by_workspace(journal: JournalLike) -> None:
    a = await new_run(journal, "run-a")
    b = await new_run(journal, "run-b")
    c = await new_run(journal, "run-c")
    await journal.heartbeat("run-a", a, workspace="/w1")
    await journal.heartbeat("run-b", b, workspace="/w2")
    await journal.heartbeat("run-c", c, workspace="/w1")
    await end(journal, "run-c", c)
    assert [r.run_id for r in await journal.live_runs()] == ["run-a", "run-b"]
    assert [r.run_id for r in await journal.live_runs("/w1")] == ["run-a"]
    assert await journal.live_runs("/nowhere") == []


async def test_notes_are_numbered_in_order(journal: JournalLike) -> None:
    await new_run(journal, "run-a")
    first = await journal.add_note("run-a", "stop", {"why": "x"})
    second = await journal.add_note("run-a", "answer", {"text": "y"})
    assert second > first
    assert [n["id"] for n in await journal.notes("run-a", after=first)] == [second]


def test_liveness_of_a_run_row() -> None:
    base = RunRow(
        run_id="r",
        task_id="t",
        parent_run_id=None,
        epoch=1,
        status="running",
        disposition=None,
        stop_reason=None,
        policy={},
        policy_version="p",
        host="here",
        started_at=100.0,
        ended_at=None,
        candidate_digest=None,
        handoff=None,
        goal="g",
        steps=0,
        pid=7,
        heartbeat_at=200.0,
        heartbeat_every=1.0,
    )

    def alive(pid: int) -> bool:
        return True

    def dead(pid: int) -> bool:
        return False

    assert base.liveness(201.5, host="here", alive=alive) == ("running", 100.0)
    # Two heartbeats missed: stale since the last one, whatever the host.
    assert base.liveness(202.5, host="elsewhere", alive=alive) == ("stale", 200.0)
    # On this machine a dead process is stale at once.
    assert base.liveness(200.1, host="here", alive=dead) == ("stale", 200.0)
    # On another machine its pid means nothing here.
    assert base.liveness(200.1, host="elsewhere", alive=dead) == ("running", 100.0)
    waiting = attrs.evolve(base, waiting="approval", waiting_since=150.0)
    assert waiting.liveness(200.5, host="here", alive=alive) == ("waiting (approval)", 150.0)
    ended = attrs.evolve(base, status="stopped", ended_at=300.0)
    assert ended.liveness(1e9, host="here", alive=dead) == ("stopped", 300.0)


async def test_sqlite_journal_of_version_3_gains_the_liveness_columns(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        for migration in journal_schema.SQLITE_MIGRATIONS[:3]:
            for table, column, declaration in migration.columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            conn.executescript(migration.script)
        conn.execute("PRAGMA user_version = 3")
        conn.execute("INSERT INTO tasks VALUES ('t', 'goal', '{}', 'c1', 0)")
        conn.execute(
            "INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,"
            " started_at) VALUES ('run-a', 't', 1, 'running', '{}', 'p1', 'h1', 0)"
        )
    conn.close()
    async with open_journal(db_path) as j:
        run = await j.get_run("run-a")
        assert (run.pid, run.heartbeat_at, run.waiting) == (None, None, None)
        assert await j.heartbeat("run-a", 1, pid=1, workspace="/w", every=5.0)
        assert [r.run_id for r in await j.live_runs("/w")] == ["run-a"]
    assert user_version(db_path) == SCHEMA_VERSION


# -- large contents as blobs ------------------------------------------------------------------


async def _scalar(target: str, sql: str) -> Any:
    if is_postgres_url(target):
        conn = await asyncpg.connect(target)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()
    with sqlite3.connect(target) as db:
        value = db.execute(sql).fetchone()[0]
    db.close()
    return value


def _write_step(run_id: str, n: int, content: str, args: dict[str, Any] | None = None) -> Any:
    """A write_file step as the controller journals it: the content in action and event."""
    args = {"path": "a.py", "content": content, **(args or {})}
    return step(
        run_id,
        n,
        action=canonical_json({"tool": "write_file", "args": args}),
        event={"type": "action", "tool": "write_file", "args": args, "result": {"output": "ok"}},
    )


LARGE_TEXT = st.text(min_size=1, max_size=20).map(lambda t: t * (BLOB_MIN // len(t) + 1))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    content=st.one_of(LARGE_TEXT, st.text(max_size=30)),
    extra=st.dictionaries(
        st.sampled_from(["$blob", "$lit", "n", "é"]),
        st.one_of(JSON_VALUES, LARGE_TEXT, st.just({"$blob": "0" * 32})),
        max_size=3,
    ),
)
async def test_any_content_round_trips_through_blobs(
    journal: JournalLike, content: str, extra: dict[str, Any]
) -> None:
    # Whatever the content (large or not, any text, data that looks like a
    # reference), steps and notes read back exactly as they were written.
    run_id = f"run-{next(RUN_IDS)}"
    epoch = await new_run(journal, run_id)
    record = _write_step(run_id, 1, content, {"extra": extra})
    await journal.append_step(run_id, epoch, record)
    await journal.append_steps(run_id, epoch, [_write_step(run_id, 2, content, extra)])
    body = {"key": "k", "args": {"content": content, **extra}, "nested": [extra, content]}
    note = await journal.add_note(run_id, "effect", body)
    read = await journal.steps(run_id)
    assert read[0] == record
    assert read[1] == _write_step(run_id, 2, content, extra)
    assert [n["body"] for n in await journal.notes(run_id)] == [body]
    assert (await journal.latest_note(run_id, "effect") or {})["id"] == note
    assert await journal.ending_step(run_id) is None


_ARGS = st.dictionaries(st.sampled_from(["path", "content", "n", "flag"]), JSON_VALUES, max_size=3)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=_ARGS,
    event_args=st.one_of(st.none(), _ARGS),
    tool=st.sampled_from(["write_file", "run_command"]),
    event_tool=st.sampled_from([None, "read_file"]),
    candidate=st.one_of(st.none(), st.just("c" * 64), st.text(max_size=5)),
    delta_candidate=st.one_of(st.none(), st.just("c" * 64), st.integers()),
    more=st.dictionaries(
        st.sampled_from(["result", "note", "tool", "args"]), JSON_VALUES, max_size=2
    ),
)
async def test_what_an_event_shares_with_its_step_reads_back_exactly(
    journal: JournalLike,
    args: dict[str, Any],
    event_args: dict[str, Any] | None,
    tool: str,
    event_tool: str | None,
    candidate: str | None,
    delta_candidate: Any,
    more: dict[str, Any],
) -> None:
    # An action's event repeats the step's tool and arguments, and its state
    # delta the event's candidate: stored once, read back the same, to the type
    # (``True`` is not ``1``, ``1`` is not ``1.0``) and to the character (the
    # action's canonical text is NFC, the event's arguments need not be).
    run_id = f"run-{next(RUN_IDS)}"
    epoch = await new_run(journal, run_id)
    event: dict[str, Any] = {
        "type": "action",
        "tool": event_tool or tool,
        "args": args if event_args is None else event_args,
        **{k: v for k, v in more.items() if k not in ("tool", "args")},
    }
    if candidate is not None:
        event["candidate"] = candidate
    delta = {} if delta_candidate is None else {"candidate": delta_candidate}
    record = step(
        run_id,
        1,
        action=canonical_json({"tool": tool, "args": args}),
        event=event,
        state_delta=delta,
    )
    await journal.append_step(run_id, epoch, record)
    (read,) = await journal.steps(run_id)
    assert read == record
    assert json.dumps(read, sort_keys=True) == json.dumps(record, sort_keys=True)
    assert list(read["event"]) == list(record["event"])


async def test_a_large_write_is_stored_once_for_its_step_event_and_note(
    journal: JournalLike, target: str
) -> None:
    epoch = await new_run(journal, "run-b")
    content = "line of a file\n" * 140  # 2 KB
    await journal.append_step("run-b", epoch, _write_step("run-b", 1, content))
    await journal.add_note("run-b", "effect", {"args": {"path": "a.py", "content": content}})
    # A later step that reads the same content back shares the blob too.
    await journal.append_step(
        "run-b", epoch, step("run-b", 2, event={"result": {"output": content}})
    )
    assert await _scalar(target, "SELECT count(*) FROM blobs") == 1
    inline = await _scalar(
        target,
        "SELECT sum(length(coalesce(action, '')) + length(coalesce(event, ''))) FROM steps",
    )
    assert inline < 600
    assert await _scalar(target, "SELECT max(length(body)) FROM notes") < 200
    assert (await journal.steps("run-b"))[1]["event"]["result"]["output"] == content


@pytest.mark.parametrize("damage", ["flip", "delete"])
async def test_a_corrupted_blob_is_reported_with_its_run_and_step(
    journal: JournalLike, target: str, damage: str
) -> None:
    epoch = await new_run(journal, "run-c")
    content = " ".join(str(n * n) for n in range(400))
    await journal.append_step("run-c", epoch, step("run-c", 1))
    await journal.append_step("run-c", epoch, _write_step("run-c", 2, content))
    note = await journal.add_note("run-c", "effect", {"args": {"content": content}})
    if damage == "flip":
        # One byte of the stored (compressed) content changed.
        if is_postgres_url(target):
            sql = "UPDATE blobs SET body = overlay(body placing '\\x00'::bytea from 40 for 1)"
        else:
            flipped = "substr(body, 1, 39) || x'00' || substr(body, 41)"
            sql = f"UPDATE blobs SET body = CAST({flipped} AS BLOB)"
        why = "does not match its digest"
    else:
        sql, why = "DELETE FROM blobs", "which is missing"
    await _corrupt(target, sql)
    with pytest.raises(JournalError, match=f"step 2 of run run-c is corrupt.*{why}"):
        await journal.steps("run-c")
    with pytest.raises(JournalError, match=f"note {note} of run run-c is corrupt.*{why}"):
        await journal.notes("run-c")
    # Writing the same content again repairs the blob.
    await journal.append_step("run-c", epoch, _write_step("run-c", 3, content))
    assert [s["step"] for s in await journal.steps("run-c")] == [1, 2, 3]


async def test_sqlite_journal_of_version_5_reads_its_notes_and_gains_blobs(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        for migration in journal_schema.SQLITE_MIGRATIONS[:5]:
            for table, column, declaration in migration.columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            conn.executescript(migration.script)
        conn.execute("PRAGMA user_version = 5")
        conn.execute("INSERT INTO tasks VALUES ('t', 'goal', '{}', 'c1', 0)")
        conn.execute(
            "INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,"
            " started_at) VALUES ('run-a', 't', 1, 'running', '{}', 'p1', 'h1', 0)"
        )
        # A note written before blobs, whose data looks like a reference: read as data.
        body = '{"args": {"$blob": "' + "0" * 32 + '", "content": "' + "z" * 2000 + '"}}'
        conn.execute(
            "INSERT INTO notes (run_id, kind, body, at) VALUES ('run-a', 'e', ?, 0)", (body,)
        )
    conn.close()
    async with open_journal(db_path) as j:
        (note,) = await j.notes("run-a")
        assert note["body"]["args"] == {"$blob": "0" * 32, "content": "z" * 2000}
        await j.add_note("run-a", "e", {"content": "z" * 2000})
        assert [n["body"] for n in await j.notes("run-a")][1] == {"content": "z" * 2000}
    assert user_version(db_path) == SCHEMA_VERSION


# -- running totals of spend, open effects -------------------------------------------------------


#: SQLite: the spend summed per kind and dimension over its rows, those of earlier
#: versions (one per dimension) and the records (their amounts in one column).
SPEND_SUMMED = """
    SELECT kind, dimension, sum(amount) FROM (
        SELECT kind, dimension, amount FROM spend
        UNION ALL
        SELECT r.kind, a.key, a.value FROM spend_records AS r, json_each(r.amounts) AS a
    ) GROUP BY kind, dimension
"""


async def test_sqlite_journal_of_version_6_sums_its_spend_once_then_keeps_totals(
    db_path: Path,
) -> None:
    with sqlite3.connect(db_path) as conn:
        for migration in journal_schema.SQLITE_MIGRATIONS[:6]:
            for table, column, declaration in migration.columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            conn.executescript(migration.script)
        conn.execute("PRAGMA user_version = 6")
        conn.execute("INSERT INTO tasks VALUES ('t', 'goal', '{}', 'c1', 0)")
        conn.execute(
            "INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,"
            " started_at) VALUES ('run-a', 't', 1, 'running', '{}', 'p1', 'h1', 0)"
        )
        conn.executemany(
            "INSERT INTO spend (task_id, run_id, dimension, amount, kind, note, at)"
            " VALUES ('t', 'run-a', ?, ?, ?, '', 0)",
            [("steps", 1.0, "settle"), ("steps", 2.0, "settle"), ("steps", 5.0, "reserve")],
        )
    conn.close()
    async with open_journal(db_path) as j:
        assert await j.spend_totals("t") == {"steps": 3.0}
        await j.add_spend("t", "run-a", {"steps": 1.0, "cost_usd": 0.5}, "charge")
        await j.add_spend("t", "run-a", {"steps": 4.0}, "settle", defer=True)
        assert await j.spend_totals("t") == {"cost_usd": 0.5, "steps": 8.0}
        assert await j.spend_totals("t", kinds=["reserve"]) == {"steps": 5.0}
        assert len(await j.spend_rows("run-a")) == 6
    # The totals are what the rows sum to: a trigger keeps them in the rows' transaction.
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            f"SELECT kind, dimension, total FROM spend_totals EXCEPT {SPEND_SUMMED}"
        ).fetchall()
    conn.close()
    assert rows == []


async def test_spend_totals_are_the_rows_summed_on_either_backend(
    journal: JournalLike, target: str
) -> None:
    await new_run(journal, "run-s")
    for n in range(1, 6):
        await journal.add_spend(TASK, "run-s", {"steps": 1.0, "tokens_in": n}, "settle")
    await journal.add_spend(TASK, "run-s", {"steps": 9.0}, "reserve", defer=True)
    await journal.add_spend(TASK, "run-s", {"tool_calls:x": 1.0}, "charge", defer=True)
    assert await journal.spend_totals(TASK) == {"steps": 5.0, "tokens_in": 15.0, "tool_calls:x": 1}
    assert await _scalar(target, "SELECT count(*) FROM spend_totals") == 4


async def test_effect_notes_and_counts_read_only_what_is_asked(journal: JournalLike) -> None:
    epoch = await new_run(journal, "run-e")
    for n in range(5):
        await dispatch(journal, "run-e", epoch, f"k{n}", args_hash=f"h{n}")
        await journal.add_note("run-e", "effect", {"key": f"k{n}", "args": {"n": n}})
    # Another kind, and an effect note whose data only mentions a key, are not it.
    await journal.add_note("run-e", "start", {"key": "k1"})
    await journal.add_note("run-e", "effect", {"key": "k9", "args": {"key": "k7"}})
    await journal.add_note("run-e", "effect", {"key": "k4", "args": {"again": True}})
    found = await journal.effect_notes("run-e", ["k1", "k4", "k7"])
    assert [(n["kind"], n["body"]["key"], n["body"]["args"]) for n in found] == [
        ("effect", "k1", {"n": 1}),
        ("effect", "k4", {"n": 4}),
        ("effect", "k4", {"again": True}),
    ]
    assert await journal.effect_notes("run-e", []) == []
    assert await journal.count_effects(TASK) == 5
    assert await journal.count_effects("task-2") == 0


async def test_a_dispatch_journals_its_effect_note_in_its_own_commit(
    journal: JournalLike,
) -> None:
    epoch = await new_run(journal, "run-n")
    body = {"key": "k1", "args": {"content": "y" * 3000}, "before": "absent"}
    common: dict[str, Any] = {
        "run_id": "run-n",
        "epoch": epoch,
        "task_id": TASK,
        "step": 1,
        "tool": "write_file",
        "target": "file:a",
        "args_hash": "h",
    }
    note = await journal.record_dispatch(key="k1", note=body, **common)
    assert await journal.record_dispatch(key="k1", **common) is None  # a retry: no note
    assert [(n["id"], n["kind"], n["body"]) for n in await journal.notes("run-n")] == [
        (note, "effect", body)
    ]
    # A dispatch the journal refuses writes no note either.
    await journal.end_run(
        "run-n", epoch, disposition="failed", stop_reason=None, candidate_digest=None, handoff=None
    )
    with pytest.raises(FencedError):
        await journal.record_dispatch(key="k2", note={"key": "k2"}, **common)
    assert len(await journal.notes("run-n")) == 1


async def test_a_deferred_settlement_is_written_with_the_step(
    journal: JournalLike, target: str
) -> None:
    epoch = await new_run(journal, "run-d")
    await dispatch(journal, "run-d", epoch, "k1")
    await journal.settle_effect(
        "k1", "confirmed", {"status": "ok"}, run_id="run-d", epoch=epoch, defer=True
    )
    # Not yet in the journal: another connection still sees it dispatched.
    assert await _scalar(target, "SELECT state FROM effects WHERE key = 'k1'") == "dispatched"
    await journal.append_step("run-d", epoch, step("run-d", 1))
    assert await _scalar(target, "SELECT state FROM effects WHERE key = 'k1'") == "confirmed"
    # A deferred settlement its fence refuses writes nothing, and raises nothing;
    # the step written with it is refused by the same fence.
    await dispatch(journal, "run-d", epoch, "k2")
    await journal.settle_effect("k2", "failed", None, run_id="run-d", epoch=epoch + 1, defer=True)
    with pytest.raises(FencedError):
        await journal.append_step("run-d", epoch + 1, step("run-d", 2))
    assert await _scalar(target, "SELECT state FROM effects WHERE key = 'k2'") == "dispatched"
    # Reads see deferred settlements: they are written first.
    await journal.settle_effect("k2", "failed", None, run_id="run-d", epoch=epoch, defer=True)
    (effect,) = await journal.effects(run_id="run-d", states=["failed"])
    assert effect.key == "k2"


async def test_a_deferred_settlement_is_written_when_the_journal_closes(target: str) -> None:
    async with open_journal(target) as j:
        await j.put_task(TASK, "goal", {}, "c1")
        epoch = await new_run(j, "run-f")
        await dispatch(j, "run-f", epoch, "k1")
        await j.settle_effect("k1", "confirmed", None, run_id="run-f", epoch=epoch, defer=True)
    assert await _scalar(target, "SELECT state FROM effects WHERE key = 'k1'") == "confirmed"
