"""
The SQLite journal's SQL: every statement it runs, by name.

Nothing outside this module and ``schema`` spells SQL for SQLite; the journal
(``sqlite``) only binds parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from proctor.runtime._journal.schema import EFFECT_COLUMNS, RUN_COLUMNS, STEP_COLUMNS

__all__ = ("NOW", "Sql")

# --------------------------------------------------------------------------------------
# SQL: the schema and every statement. Nothing outside this section spells SQL.
# --------------------------------------------------------------------------------------


#: Now, in seconds since the Unix epoch, by SQLite's clock (milliseconds resolution).
NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class Sql:
    """Every statement the journal runs, by name."""

    setup = """
        PRAGMA busy_timeout = 5000;
        PRAGMA foreign_keys = ON;
        PRAGMA journal_mode = WAL;
    """
    user_version = "PRAGMA user_version"
    integrity_check = "PRAGMA integrity_check"
    begin = "BEGIN IMMEDIATE"

    @staticmethod
    def synchronous(level: str) -> str:
        # PRAGMA takes no bound parameters; ``level`` is one of SYNCHRONOUS.
        return f"PRAGMA synchronous = {level}"

    @staticmethod
    def set_user_version(version: int) -> str:
        # PRAGMA takes no bound parameters; the version is an int we computed.
        return f"PRAGMA user_version = {int(version)}"

    @staticmethod
    def table_info(table: str) -> str:
        # ``table`` comes from SQLITE_MIGRATIONS, never from input.
        return f"PRAGMA table_info({table})"

    @staticmethod
    def add_column(table: str, column: str, declaration: str) -> str:
        return f"ALTER TABLE {table} ADD COLUMN {column} {declaration}"

    put_task = """
        INSERT INTO tasks (task_id, goal, spec, contract_version, created_at)
        VALUES (:task_id, :goal, :spec, :contract_version, :now)
        ON CONFLICT (task_id) DO UPDATE
        SET spec = excluded.spec, contract_version = excluded.contract_version
    """
    get_task = """
        SELECT task_id, goal, spec, contract_version, created_at
        FROM tasks WHERE task_id = ?
    """

    # The epoch is computed in the insert itself: no read-then-write race.
    create_run = """
        INSERT INTO runs (
            run_id, task_id, parent_run_id, epoch, status, policy, policy_version,
            host, started_at
        )
        SELECT :run_id, :task_id, :parent_run_id, coalesce(max(epoch), 0) + 1,
               'running', :policy, :policy_version, :host, :now
        FROM runs WHERE task_id = :task_id
        RETURNING epoch
    """
    end_run = """
        UPDATE runs
        SET status = :disposition, disposition = :disposition, stop_reason = :stop_reason,
            ended_at = :now, candidate_digest = :candidate_digest, handoff = :handoff
        WHERE run_id = :run_id AND epoch = :epoch AND status = 'running'
    """
    run_fence = "SELECT status, epoch FROM runs WHERE run_id = ?"
    get_run = f"SELECT {RUN_COLUMNS} WHERE r.run_id = ?"
    # A range over the primary key: [prefix, successor of prefix).
    runs_by_prefix = f"""
        SELECT {RUN_COLUMNS}
        WHERE r.run_id >= :low AND r.run_id < :high
        ORDER BY r.run_id LIMIT 2
    """
    runs_by_prefix_scan = f"""
        SELECT {RUN_COLUMNS}
        WHERE substr(r.run_id, 1, length(:low)) = :low
        ORDER BY r.run_id LIMIT 2
    """
    list_runs = f"SELECT {RUN_COLUMNS} ORDER BY r.started_at DESC, r.rowid DESC LIMIT ?"
    runs_of_task = f"SELECT {RUN_COLUMNS} WHERE r.task_id = ? ORDER BY r.epoch"
    live_runs = f"SELECT {RUN_COLUMNS} WHERE r.status = 'running' ORDER BY r.started_at, r.rowid"
    live_runs_at = f"""
        SELECT {RUN_COLUMNS} WHERE r.status = 'running' AND r.workspace = ?
        ORDER BY r.started_at, r.rowid
    """
    # Fenced like a step; pid, workspace and the interval are kept when not given,
    # and the time a wait began only changes when what the run waits for does.
    heartbeat = """
        UPDATE runs
        SET heartbeat_at = :now,
            pid = coalesce(:pid, pid),
            workspace = coalesce(:workspace, workspace),
            heartbeat_every = coalesce(:every, heartbeat_every),
            waiting_since = CASE WHEN waiting IS :waiting THEN waiting_since ELSE :now END,
            waiting = :waiting
        WHERE run_id = :run_id AND epoch = :epoch AND status = 'running'
    """

    # Fenced inserts: the row is written only if the run's epoch matches, in the
    # same statement, so a refused write writes nothing and costs one round trip.
    append_step = """
        INSERT INTO steps (
            run_id, step, trace_id, kind, action, tool_status, result_fingerprint,
            state_version, state_delta, remaining, decision, progress, reason,
            stop_reason, disposition, policy_version, at, event, extra
        )
        SELECT :run_id, :step, :trace_id, :kind, :action, :tool_status, :result_fingerprint,
               :state_version, :state_delta, :remaining, :decision, :progress, :reason,
               :stop_reason, :disposition, :policy_version, :at, :event, :extra
        WHERE EXISTS (
            SELECT 1 FROM runs
            WHERE run_id = :run_id AND epoch = :epoch AND status <> 'queued'
        )
    """
    steps = f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = ? AND step > ? ORDER BY step"
    # Walks the run's steps from the last: the first with a disposition is the one.
    ending_step = f"""
        SELECT {STEP_COLUMNS} FROM steps
        WHERE run_id = ? AND disposition IS NOT NULL ORDER BY step DESC LIMIT 1
    """
    # The largest id of the index's run_id entries: one index probe.
    newest_note = "SELECT max(id) FROM notes WHERE run_id = ?"

    # An upsert fenced by the run and guarded by the arguments' hash: a new key is
    # inserted, a retry of the same call is dispatched again, anything else writes
    # nothing and is diagnosed by ``dispatch_check``.
    record_dispatch = """
        INSERT INTO effects (
            key, run_id, task_id, step, tool, target, args_hash, state,
            created_at, updated_at, outcome
        )
        SELECT :key, :run_id, :task_id, :step, :tool, :target, :args_hash, 'dispatched',
               :now, :now, NULL
        WHERE EXISTS (
            SELECT 1 FROM runs
            WHERE run_id = :run_id AND epoch = :epoch AND status = 'running'
        )
        ON CONFLICT (key) DO UPDATE
        SET run_id = excluded.run_id, step = excluded.step, state = 'dispatched',
            updated_at = excluded.updated_at, outcome = NULL
        WHERE effects.args_hash = excluded.args_hash
    """
    dispatch_check = """
        SELECT r.status, r.epoch, (SELECT e.args_hash FROM effects AS e WHERE e.key = :key)
        FROM runs AS r WHERE r.run_id = :run_id
    """
    settle_effect = """
        UPDATE effects SET state = :state, outcome = :outcome, updated_at = :now
        WHERE key = :key
    """
    # Fenced like a step: by the writer's epoch, whether or not its run has ended
    # (open dispatches are marked after the end).
    settle_effect_fenced = """
        UPDATE effects SET state = :state, outcome = :outcome, updated_at = :now
        WHERE key = :key AND EXISTS (
            SELECT 1 FROM runs
            WHERE run_id = :run_id AND epoch = :epoch AND status <> 'queued'
        )
    """
    effect_exists = "SELECT 1 FROM effects WHERE key = ?"
    effects = f"SELECT {EFFECT_COLUMNS} FROM effects"
    effects_order = "ORDER BY created_at, rowid"
    effects_filters: ClassVar[Mapping[str, str]] = {
        "task_id": "task_id = :task_id",
        "run_id": "run_id = :run_id",
        "states": "state IN (SELECT value FROM json_each(:states))",
    }

    add_evidence = """
        INSERT INTO evidence (
            run_id, task_id, candidate_digest, contract_version, check_name, passed,
            record, at
        )
        VALUES (:run_id, :task_id, :candidate_digest, :contract_version, :check_name,
                :passed, :record, :at)
    """
    evidence = "SELECT record FROM evidence"
    evidence_order = "ORDER BY id"
    evidence_filters: ClassVar[Mapping[str, str]] = {
        "task_id": "task_id = :task_id",
        "run_id": "run_id = :run_id",
    }

    # One row per record, its amounts in one column, its task NULL when it is the
    # run's; every deferred record in the transaction of the operation that writes them.
    add_spend = """
        INSERT INTO spend_records (task_id, run_id, kind, amounts, note, at)
        VALUES (nullif(?1, (SELECT task_id FROM runs WHERE run_id = ?2)), ?2, ?3, ?4, ?5, ?6)
    """
    # From the running totals (a trigger keeps them with every row), not the rows.
    spend_totals = """
        SELECT dimension, sum(total) FROM spend_totals
        WHERE task_id = ? AND kind IN (SELECT value FROM json_each(?))
        GROUP BY dimension ORDER BY dimension
    """

    # The rows of earlier versions (one per dimension) first, then the records
    # (see ``rows.spend_rows_of``).
    spend_rows = """
        SELECT 0, id, dimension, amount, kind, at FROM spend WHERE run_id = :run_id
        UNION ALL
        SELECT 1, id, amounts, NULL, kind, at FROM spend_records WHERE run_id = :run_id
        ORDER BY 1, 2
    """

    record_process = """
        INSERT INTO processes (run_id, pgid, command, started_at) VALUES (?, ?, ?, ?)
    """
    end_process = """
        UPDATE processes SET ended_at = :now, how = :how
        WHERE rowid = (
            SELECT rowid FROM processes
            WHERE run_id = :run_id AND pgid = :pgid AND ended_at IS NULL
            ORDER BY started_at DESC LIMIT 1
        )
    """
    processes = """
        SELECT run_id, pgid, command, started_at, ended_at, how
        FROM processes WHERE run_id = ? ORDER BY started_at, pgid
    """

    add_note = """
        INSERT INTO notes (run_id, kind, body, at, packed) VALUES (?, ?, ?, ?, ?) RETURNING id
    """
    notes = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = ? AND id > ? ORDER BY id
    """
    notes_of_kinds = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = ? AND id > ? AND kind IN (SELECT value FROM json_each(?)) ORDER BY id
    """
    # A blob's digest is its key: the same contents again change nothing, and
    # contents that differ from the stored ones (damaged) are written afresh.
    put_blob = """
        INSERT INTO blobs (digest, body) VALUES (?, ?)
        ON CONFLICT (digest) DO UPDATE SET body = excluded.body WHERE body <> excluded.body
    """
    blobs = "SELECT digest, body FROM blobs WHERE digest IN (SELECT value FROM json_each(?))"
    count_effects = "SELECT count(*) FROM effects WHERE task_id = ?"
    # The run's effect notes (by index), those that may name one of the keys;
    # the caller keeps those whose key is one of them.
    effect_notes = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = ? AND kind = 'effect'
        AND EXISTS (SELECT 1 FROM json_each(?) WHERE instr(body, value) > 0) ORDER BY id
    """
    put_snapshot = """
        INSERT INTO snapshots (run_id, step, body, at) VALUES (?, ?, ?, ?)
        ON CONFLICT (run_id) DO UPDATE
        SET step = excluded.step, body = excluded.body, at = excluded.at
    """
    snapshot = "SELECT body FROM snapshots WHERE run_id = ?"
    # Walks the run's index entries from the newest: the one row is the only body read.
    latest_note = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = ? AND kind = ? ORDER BY id DESC LIMIT 1
    """

    # -- leases: lease times are seconds since the epoch by SQLite's clock --------------

    submit_run = """
        INSERT INTO runs (
            run_id, task_id, epoch, status, policy, policy_version, host, started_at
        )
        VALUES (:run_id, :task_id, 0, 'queued', :policy, :policy_version, '', :now)
    """
    # Under BEGIN IMMEDIATE, so the pick and the take are one atomic step.
    claim_pick = f"""
        SELECT run_id, epoch FROM runs
        WHERE status IN ('queued', 'running')
          AND (status = 'queued' OR lease_until <= {NOW})
        ORDER BY started_at, rowid LIMIT 1
    """
    # The new epoch is above every epoch of the task, so (task_id, epoch) stays
    # unique; for a task's only run it is its previous epoch plus one.
    claim_take = f"""
        UPDATE runs
        SET epoch = (SELECT max(o.epoch) FROM runs AS o WHERE o.task_id = runs.task_id) + 1,
            status = 'running', owner = :worker, host = :worker,
            lease_until = {NOW} + :lease_seconds
        WHERE run_id = :run_id
        RETURNING task_id, epoch
    """
    renew_lease = f"""
        UPDATE runs SET lease_until = {NOW} + :lease_seconds
        WHERE run_id = :run_id AND epoch = :epoch AND status = 'running'
    """
    # A run released while running is claimable at once; an ended one keeps no lease.
    hold_task = """
        INSERT INTO holders (task_id, run_id, holder, since)
        VALUES (:task_id, :run_id, :holder, :now)
        ON CONFLICT (task_id) DO UPDATE
        SET run_id = excluded.run_id, holder = excluded.holder, since = excluded.since
        WHERE holders.holder = :replacing
        RETURNING holder
    """
    task_holder = "SELECT task_id, run_id, holder, since FROM holders WHERE task_id = ?"
    release_task = "DELETE FROM holders WHERE task_id = ? AND holder = ?"

    release_run = f"""
        UPDATE runs
        SET owner = NULL,
            lease_until = CASE WHEN status = 'running' THEN {NOW} ELSE NULL END
        WHERE run_id = :run_id AND epoch = :epoch AND status <> 'queued'
    """

    @staticmethod
    def filtered(
        select: str, filters: Mapping[str, str], present: Sequence[str], order: str
    ) -> str:
        """Compose ``select`` with the fixed filter clauses named in ``present``."""
        where = " AND ".join(filters[name] for name in present)
        return f"{select} WHERE {where} {order}" if where else f"{select} {order}"
