"""
Spend in the journal, on both backends: one row per record, its amounts in one
column, the running totals kept exact by a trigger, and the per-dimension rows of
journals written before (schema version 7) read as they are.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.test_journal import (  # noqa: F401
    SPEND_SUMMED,
    TASK,
    backend,
    journal,
    new_run,
    pg_execute,
    pg_target,
    target,
    user_version,
)

from proctor import (
    Budget,
    CommandCheck,
    Completion,
    FunctionActor,
    Observation,
    Proposal,
    Task,
    ToolCall,
    run,
)
from proctor._errors import ConfigError, JournalError
from proctor.runtime import load_run_view
from proctor.runtime._journal import (
    SCHEMA_VERSION,
    SPEND_KINDS,
    JournalLike,
    SpendRow,
    is_postgres_url,
    open_journal,
)
from proctor.runtime._journal import postgres_sql as pg_sql
from proctor.runtime._journal import schema as journal_schema
from proctor.runtime._report import render_report

IDS = itertools.count()
DIMENSIONS = st.sampled_from(
    ["steps", "tool_calls", "tool_calls:run_command", "wall_seconds", "cost_usd", "tokens_in"]
) | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=6)
AMOUNTS = st.floats(
    min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False
) | st.integers(-(10**6), 10**6)
#: (kind, amounts, deferred) in the order they are journaled.
RECORDS = st.lists(
    st.tuples(
        st.sampled_from(SPEND_KINDS),
        st.dictionaries(DIMENSIONS, AMOUNTS, max_size=5),
        st.booleans(),
    ),
    max_size=12,
)

Record = tuple[str, Mapping[str, float], bool]


def summed(records: Sequence[Record], kinds: Sequence[str]) -> dict[str, float]:
    """The records' amounts of ``kinds`` summed per dimension, kind by kind in order."""
    per_kind: dict[str, dict[str, float]] = {}
    for kind, amounts, _ in records:
        totals = per_kind.setdefault(kind, {})
        for dimension, amount in amounts.items():
            value = float(amount)
            totals[dimension] = totals[dimension] + value if dimension in totals else value
    out: dict[str, float] = {}
    for kind in kinds:
        for dimension, total in per_kind.get(kind, {}).items():
            out[dimension] = out[dimension] + total if dimension in out else total
    return out


def expanded(records: Sequence[Record]) -> list[tuple[str, float, str]]:
    return [(d, float(a), kind) for kind, amounts, _ in records for d, a in amounts.items()]


def plain(rows: Sequence[SpendRow]) -> list[tuple[str, float, str]]:
    return [(r.dimension, r.amount, r.kind) for r in rows]


async def _new_task(j: JournalLike) -> tuple[str, str]:
    n = next(IDS)
    task_id, run_id = f"task-s{n}", f"run-s{n}"
    await j.put_task(task_id, "spend", {}, "c1")
    await new_run(j, run_id, task_id)
    return task_id, run_id


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=RECORDS)
async def test_totals_are_the_records_amounts_summed_on_either_backend(
    journal: JournalLike,  # noqa: F811
    records: list[Record],
) -> None:
    task_id, run_id = await _new_task(journal)
    for kind, amounts, defer in records:
        await journal.add_spend(task_id, run_id, amounts, kind, defer=defer)
    # Each kind's totals are its amounts added in the order written, exactly: the
    # trigger reads back every amount as the number it was.
    for kind in SPEND_KINDS:
        assert await journal.spend_totals(task_id, kinds=[kind]) == summed(records, [kind])
    assert await journal.spend_totals(task_id) == summed(records, ["settle", "charge"])
    assert plain(await journal.spend_rows(run_id)) == expanded(records)


async def test_a_record_reads_back_as_given_its_zeros_and_order_kept(
    journal: JournalLike,  # noqa: F811
) -> None:
    task_id, run_id = await _new_task(journal)
    await journal.add_spend(task_id, run_id, {"wall_seconds": 0.1 + 0.2, "steps": 0}, "settle")
    await journal.add_spend(task_id, run_id, {}, "charge")  # nothing to journal
    await journal.add_spend(task_id, run_id, {'é "q"': 2, "steps": 1}, "charge", defer=True)
    assert plain(await journal.spend_rows(run_id)) == [
        ("wall_seconds", 0.30000000000000004, "settle"),
        ("steps", 0.0, "settle"),
        ('é "q"', 2.0, "charge"),
        ("steps", 1.0, "charge"),
    ]
    assert await journal.spend_totals(task_id) == {
        "steps": 1.0,
        "wall_seconds": 0.30000000000000004,
        'é "q"': 2.0,
    }


async def test_a_record_names_its_task_only_when_it_is_not_its_run_s(
    journal: JournalLike,  # noqa: F811
    target: str,  # noqa: F811
) -> None:
    task_id, run_id = await _new_task(journal)
    await journal.add_spend(task_id, run_id, {"steps": 1.0}, "settle")
    # Spend charged to another task than the run's is that task's.
    await journal.add_spend(TASK, run_id, {"steps": 2.0}, "settle", defer=True)
    assert await journal.spend_totals(task_id) == {"steps": 1.0}
    assert await journal.spend_totals(TASK) == {"steps": 2.0}
    assert plain(await journal.spend_rows(run_id)) == [
        ("steps", 1.0, "settle"),
        ("steps", 2.0, "settle"),
    ]
    sql = f"SELECT count(*) FROM spend_records WHERE run_id = '{run_id}' AND task_id IS NULL"
    if is_postgres_url(target):
        conn = await asyncpg.connect(target)
        try:
            named = await conn.fetchval(sql)
        finally:
            await conn.close()
    else:
        with sqlite3.connect(target) as db:
            named = db.execute(sql).fetchone()[0]
        db.close()
    assert named == 1


@pytest.mark.parametrize(
    ("amounts", "why"),
    [
        ({"a\x00b": 1.0}, "a spend dimension is a name"),
        ({"a\ud800": 1.0}, "a spend dimension is a name"),
        ({3: 1.0}, "a spend dimension is a name"),
        ({"steps": float("nan")}, "finite"),
    ],
)
async def test_a_record_that_would_not_read_back_is_refused(
    journal: JournalLike,  # noqa: F811
    amounts: dict[Any, float],
    why: str,
) -> None:
    task_id, run_id = await _new_task(journal)
    with pytest.raises(ConfigError, match=why):
        await journal.add_spend(task_id, run_id, amounts, "settle")
    assert await journal.spend_rows(run_id) == []
    assert await journal.spend_totals(task_id) == {}


@pytest.mark.parametrize("amounts", ["not json", "[1, 2]", '{"steps": "1"}'])
async def test_a_corrupt_record_is_reported_not_read(
    journal: JournalLike,  # noqa: F811
    target: str,  # noqa: F811
    amounts: str,
) -> None:
    task_id, run_id = await _new_task(journal)
    await journal.add_spend(task_id, run_id, {"steps": 1.0}, "settle")
    sql = f"UPDATE spend_records SET amounts = '{amounts}' WHERE run_id = '{run_id}'"
    if is_postgres_url(target):
        await pg_execute(target, sql)
    else:
        with sqlite3.connect(target) as conn:
            conn.execute(sql)
        conn.close()
    with pytest.raises(JournalError, match=r"spend record \d+ is corrupt in the journal"):
        await journal.spend_rows(run_id)


# -- journals of schema version 7: one row per dimension ------------------------------------


async def _a_run(root: Path, path: Path) -> tuple[str, str]:
    """A short real run: writes, reads, a missing file, a completion; its task and run ids."""
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    calls = iter(
        [
            ToolCall("write_file", {"path": "a.txt", "content": "one\n" * 400}),
            ToolCall("read_file", {"path": "a.txt"}),
            ToolCall("read_file", {"path": "missing.txt"}),
            ToolCall("write_file", {"path": "b.txt", "content": "two"}),
        ]
    )

    async def propose(observation: Observation) -> Proposal | None:
        return next(calls, Completion("done"))

    task = Task(
        goal="write two files",
        workspace=workspace,
        checks=(CommandCheck("ok", [sys.executable, "-c", "pass"]),),
        budget=Budget.of(steps=20, tool_calls=10, reserve={"steps": 2}),
        task_id="old-spend",
    )
    result = await run(task, FunctionActor(propose), path)
    return "old-spend", result.run_id


def _as_version_7(source: Path, dest: Path) -> None:
    """
    Write ``dest`` as the proctor before wrote ``source``: the schema up to version 7,
    every row copied, the spend as one row per dimension, its totals kept by that
    version's trigger as the rows go in.
    """
    with sqlite3.connect(dest) as conn:
        for migration in journal_schema.SQLITE_MIGRATIONS[:7]:
            for table, column, declaration in migration.columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            conn.executescript(migration.script)
        conn.execute("PRAGMA user_version = 7")
        conn.execute("ATTACH DATABASE ? AS src", (str(source),))
        tables = ("tasks", "runs", "steps", "effects", "evidence", "processes", "notes")
        for table in (*tables, "snapshots", "holders", "blobs"):
            conn.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table}")
        records = conn.execute(
            "SELECT coalesce(s.task_id, r.task_id), s.run_id, s.kind, s.amounts, s.note, s.at"
            " FROM src.spend_records AS s JOIN src.runs AS r ON r.run_id = s.run_id"
            " ORDER BY s.id"
        ).fetchall()
        assert records
        conn.executemany(
            "INSERT INTO spend (task_id, run_id, dimension, amount, kind, note, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (task_id, run_id, dimension, amount, kind, note, at)
                for task_id, run_id, kind, amounts, note, at in records
                for dimension, amount in json.loads(amounts).items()
            ],
        )
    conn.close()


async def _spend_read(path: Path, task_id: str, run_id: str) -> dict[str, Any]:
    """Everything the journal's readers make of a task's spend."""
    async with open_journal(path) as j:
        view = await load_run_view(j, run_id)
        return {
            "totals": await j.spend_totals(task_id),
            "per_kind": {k: await j.spend_totals(task_id, kinds=[k]) for k in SPEND_KINDS},
            "rows": await j.spend_rows(run_id),
            "view": view,
            "report": render_report(view),
        }


def _cli(path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "proctor", *args, "--journal", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_sqlite_journal_of_version_7_reads_its_spend_as_it_was(tmp_path: Path) -> None:
    now = tmp_path / "now.db"
    task_id, run_id = await _a_run(tmp_path, now)
    old = tmp_path / "old.db"
    _as_version_7(now, old)
    assert user_version(old) == 7
    # The same run, its spend written one row per dimension: read alike, to the report.
    assert await _spend_read(old, task_id, run_id) == await _spend_read(now, task_id, run_id)
    assert user_version(old) == SCHEMA_VERSION
    for args in (("runs", "--json"), ("show", run_id)):
        assert _cli(old, *args) == _cli(now, *args)
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT count(*) FROM spend_records").fetchone()[0] == 0
        per_dimension = conn.execute("SELECT count(*) FROM spend").fetchone()[0]
    conn.close()
    async with open_journal(old) as j:
        before = await j.spend_totals(task_id)
        await j.add_spend(task_id, run_id, {"steps": 1.0, "cost_usd": 0.25}, "charge")
        after = await j.spend_totals(task_id)
        assert after == {
            **before,
            "steps": before["steps"] + 1.0,
            "cost_usd": before.get("cost_usd", 0.0) + 0.25,
        }
        rows = await j.spend_rows(run_id)
    # The rows of the version before come first, then the records, as written.
    assert len(rows) == per_dimension + 2
    assert plain(rows[-2:]) == [("steps", 1.0, "charge"), ("cost_usd", 0.25, "charge")]
    # A proctor of the version before, still running, writes its rows where it did:
    # its trigger still counts them, and they are read with the others.
    with sqlite3.connect(old) as conn:
        conn.execute(
            "INSERT INTO spend (task_id, run_id, dimension, amount, kind, note, at)"
            " VALUES (?, ?, 'steps', 2.0, 'settle', '', 0)",
            (task_id, run_id),
        )
        unsummed = conn.execute(
            f"SELECT kind, dimension, total FROM spend_totals EXCEPT {SPEND_SUMMED}"
        ).fetchall()
    conn.close()
    assert unsummed == []
    async with open_journal(old) as j:
        assert (await j.spend_totals(task_id))["steps"] == after["steps"] + 2.0
        assert len(await j.spend_rows(run_id)) == per_dimension + 3


async def test_postgresql_journal_of_version_7_reads_its_spend_as_it_was(
    pg_target: str,  # noqa: F811
) -> None:
    old_rows = [
        ("run-a", "steps", 1.0, "reserve"),
        ("run-a", "steps", 1.0, "settle"),
        ("run-a", "wall_seconds", 0.1 + 0.2, "settle"),
        ("run-b", "tool_calls:run_command", 1.0, "charge"),
        ("run-a", "wall_seconds", 1e-7, "settle"),
    ]
    values = ", ".join(
        f"('t', '{r}', '{d}', {a!r}, '{k}', '', {n})" for n, (r, d, a, k) in enumerate(old_rows)
    )
    await pg_execute(
        pg_target,
        pg_sql.Sql.schema_table
        + ";"
        + "".join(journal_schema.PG_MIGRATIONS[:7])
        + f"""
        INSERT INTO proctor_schema (version) VALUES (7);
        INSERT INTO tasks VALUES ('t', 'goal', '{{}}', 'c1', 0);
        INSERT INTO runs (run_id, task_id, epoch, status, policy, policy_version, host,
                          started_at)
        VALUES ('run-a', 't', 1, 'running', '{{}}', 'p1', 'h1', 0),
               ('run-b', 't', 2, 'running', '{{}}', 'p1', 'h1', 0);
        INSERT INTO spend (task_id, run_id, dimension, amount, kind, note, at)
        VALUES {values};
        """,
    )
    async with open_journal(pg_target) as j:
        assert await j.spend_totals("t") == {
            "steps": 1.0,
            "tool_calls:run_command": 1.0,
            "wall_seconds": 0.1 + 0.2 + 1e-7,
        }
        assert await j.spend_totals("t", kinds=["reserve"]) == {"steps": 1.0}
        assert plain(await j.spend_rows("run-a")) == [
            (d, a, k) for r, d, a, k in old_rows if r == "run-a"
        ]
        await j.add_spend("t", "run-a", {"steps": 1.0, "wall_seconds": 0.5}, "settle", defer=True)
        assert (await j.spend_totals("t"))["wall_seconds"] == 0.1 + 0.2 + 1e-7 + 0.5
        assert plain((await j.spend_rows("run-a"))[-2:]) == [
            ("steps", 1.0, "settle"),
            ("wall_seconds", 0.5, "settle"),
        ]
    # A host of the version before, still running, writes its rows where it did.
    await pg_execute(
        pg_target,
        "INSERT INTO spend (task_id, run_id, dimension, amount, kind, note, at)"
        " VALUES ('t', 'run-b', 'steps', 3.0, 'settle', '', 9)",
    )
    async with open_journal(pg_target) as j:
        assert (await j.spend_totals("t"))["steps"] == 5.0
        assert plain(await j.spend_rows("run-b")) == [
            ("tool_calls:run_command", 1.0, "charge"),
            ("steps", 3.0, "settle"),
        ]
        assert await j.integrity_check() == "ok"
    conn = await asyncpg.connect(pg_target)
    try:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM proctor_schema")]
    finally:
        await conn.close()
    assert sorted(versions) == [7, SCHEMA_VERSION]
