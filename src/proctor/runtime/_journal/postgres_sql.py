"""
The PostgreSQL journal's SQL: every statement it runs, by name.

Nothing outside this module and ``schema`` spells SQL for PostgreSQL; the
journal (``postgres``) only binds parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proctor.runtime._journal.schema import EFFECT_COLUMNS, RUN_COLUMNS, STEP_COLUMNS

__all__ = ("NOW", "STEP_ORDER", "TABLES", "Sql", "spend_rows")

# --------------------------------------------------------------------------------------
# SQL: the schema and every statement. Nothing outside this section spells SQL.
# --------------------------------------------------------------------------------------

#: Now, in seconds since the Unix epoch, by the server's clock.
NOW = "extract(epoch FROM now())::float8"

#: The fence of a write that belongs to a run, on ($run, $epoch): the run's row is
#: locked FOR SHARE, so a claim that moves its epoch is ordered with the write.
_FENCE = """
    EXISTS (
        SELECT 1 FROM runs
        WHERE run_id = {run} AND epoch = {epoch} AND status {status}
        FOR SHARE
    )
"""


def _fence(run: str, epoch: str, *, running: bool) -> str:
    return _FENCE.format(run=run, epoch=epoch, status="= 'running'" if running else "<> 'queued'")


def _put_blobs(first: int, where: str = "") -> str:
    """
    The insert of blobs given as two arrays (digests, contents) from ``$first`` on:
    the same contents again change nothing; contents that differ from the stored
    ones (damaged) are written afresh.
    """
    return f"""
        INSERT INTO blobs (digest, body)
        SELECT d, b FROM unnest(${first}::text[], ${first + 1}::bytea[]) AS u (d, b) {where}
        ON CONFLICT (digest) DO UPDATE SET body = excluded.body
        WHERE blobs.body <> excluded.body
    """


def spend_rows(first: int) -> str:
    """
    The insert of spend records given as six arrays, from parameter ``$first`` on;
    a record's task is NULL when it is its run's.
    """
    arrays = ", ".join(
        f"${first + i}::{kind}[]"
        for i, kind in enumerate(("text", "text", "text", "text", "text", "float8"))
    )
    return f"""
        INSERT INTO spend_records (task_id, run_id, kind, amounts, note, at)
        SELECT NULLIF(u.task_id, (SELECT r.task_id FROM runs AS r WHERE r.run_id = u.run_id)),
               u.run_id, u.kind, u.amounts, u.note, u.at
        FROM unnest({arrays})
            WITH ORDINALITY AS u (task_id, run_id, kind, amounts, note, at, n)
        ORDER BY u.n
    """


_STEP_INSERT = """
    INSERT INTO steps (
        run_id, step, trace_id, kind, action, tool_status, result_fingerprint,
        state_version, state_delta, remaining, decision, progress, reason,
        stop_reason, disposition, policy_version, at, event, extra
    )
"""
_STEP_VALUES = """
    $1::text, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::text,
    $8::bigint, $9::text, $10::text, $11::text, $12::boolean, $13::text,
    $14::text, $15::text, $16::text, $17::float8, $18::text, $19::text
"""
STEP_ORDER: tuple[str, ...] = (
    "run_id",
    "step",
    "trace_id",
    "kind",
    "action",
    "tool_status",
    "result_fingerprint",
    "state_version",
    "state_delta",
    "remaining",
    "decision",
    "progress",
    "reason",
    "stop_reason",
    "disposition",
    "policy_version",
    "at",
    "event",
    "extra",
)


class Sql:
    """Every statement the PostgreSQL journal runs, by name."""

    schema_table = """
        CREATE TABLE IF NOT EXISTS proctor_schema (
            version     integer NOT NULL,
            migrated_at timestamptz NOT NULL DEFAULT now()
        )
    """
    # The session's default synchronous_commit decides whether durable commits
    # must raise it.
    probe = """
        SELECT to_regclass('proctor_schema') IS NOT NULL,
               (SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit')
    """
    schema_version = "SELECT coalesce(max(version), 0) FROM proctor_schema"
    record_version = "INSERT INTO proctor_schema (version) VALUES ($1)"
    migration_lock = "SELECT pg_advisory_xact_lock($1)"
    tables = """
        SELECT name FROM unnest($1::text[]) AS name WHERE to_regclass(name) IS NULL
    """
    begin = "BEGIN"
    begin_durable = "BEGIN; SET LOCAL synchronous_commit = on"
    commit = "COMMIT"
    rollback = "ROLLBACK"

    put_task = """
        INSERT INTO tasks (task_id, goal, spec, contract_version, created_at)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (task_id) DO UPDATE
        SET spec = excluded.spec, contract_version = excluded.contract_version
    """
    get_task = """
        SELECT task_id, goal, spec, contract_version, created_at
        FROM tasks WHERE task_id = $1
    """

    # The epoch is computed in the insert itself; two concurrent ones may compute
    # the same, and the loser is retried (runs_task_epoch).
    create_run = """
        INSERT INTO runs (
            run_id, task_id, parent_run_id, epoch, status, policy, policy_version,
            host, started_at
        )
        SELECT $1::text, $2::text, $3::text, coalesce(max(epoch), 0) + 1,
               'running', $4::text, $5::text, $6::text, $7::float8
        FROM runs WHERE task_id = $2::text
        RETURNING epoch
    """
    end_run = """
        UPDATE runs
        SET status = $3, disposition = $3, stop_reason = $4, ended_at = $5,
            candidate_digest = $6, handoff = $7
        WHERE run_id = $1 AND epoch = $2 AND status = 'running'
    """
    run_fence = "SELECT status, epoch FROM runs WHERE run_id = $1"
    run_fence_locked = "SELECT status, epoch FROM runs WHERE run_id = $1 FOR SHARE"
    get_run = f"SELECT {RUN_COLUMNS} WHERE r.run_id = $1"
    # A range over the primary key ("C" collation: code point order).
    runs_by_prefix = f"""
        SELECT {RUN_COLUMNS}
        WHERE r.run_id >= $1 AND r.run_id < $2
        ORDER BY r.run_id LIMIT 2
    """
    runs_by_prefix_scan = f"""
        SELECT {RUN_COLUMNS}
        WHERE starts_with(r.run_id, $1)
        ORDER BY r.run_id LIMIT 2
    """
    list_runs = f"SELECT {RUN_COLUMNS} ORDER BY r.started_at DESC, r.seq DESC LIMIT $1"
    runs_of_task = f"SELECT {RUN_COLUMNS} WHERE r.task_id = $1 ORDER BY r.epoch"
    live_runs = f"SELECT {RUN_COLUMNS} WHERE r.status = 'running' ORDER BY r.started_at, r.seq"
    live_runs_at = f"""
        SELECT {RUN_COLUMNS} WHERE r.status = 'running' AND r.workspace = $1
        ORDER BY r.started_at, r.seq
    """
    heartbeat = """
        UPDATE runs
        SET heartbeat_at = $3,
            pid = coalesce($5::bigint, pid),
            workspace = coalesce($6::text, workspace),
            heartbeat_every = coalesce($7::float8, heartbeat_every),
            waiting_since = CASE WHEN waiting IS NOT DISTINCT FROM $4::text
                            THEN waiting_since ELSE $3 END,
            waiting = $4::text
        WHERE run_id = $1 AND epoch = $2 AND status = 'running'
    """

    append_step = f"""
        {_STEP_INSERT}
        SELECT {_STEP_VALUES}
        WHERE {_fence("$1::text", "$20::bigint", running=False)}
    """
    # The deferred spend rows, the fenced step and the run's newest note id, in
    # one statement: one round trip. A data-modifying WITH runs to completion
    # whether or not the query reads it.
    append_step_with_spend = f"""
        WITH step AS (
            {_STEP_INSERT}
            SELECT {_STEP_VALUES}
            WHERE {_fence("$1::text", "$20::bigint", running=False)}
            RETURNING 1
        ),
        spent AS ({spend_rows(21)}),
        stored AS ({_put_blobs(27, "WHERE EXISTS (SELECT 1 FROM step)")})
        SELECT (SELECT count(*) FROM step), (SELECT max(id) FROM notes WHERE run_id = $1::text)
    """
    put_blobs = _put_blobs(1)
    blobs = "SELECT digest, body FROM blobs WHERE digest = ANY($1::text[])"
    add_spend_rows = spend_rows(1)
    # Inside a transaction that locked the run's row after checking its epoch.
    insert_step = f"{_STEP_INSERT} VALUES ({_STEP_VALUES})"
    steps = f"SELECT {STEP_COLUMNS} FROM steps WHERE run_id = $1 AND step > $2 ORDER BY step"
    ending_step = f"""
        SELECT {STEP_COLUMNS} FROM steps
        WHERE run_id = $1 AND disposition IS NOT NULL ORDER BY step DESC LIMIT 1
    """

    record_dispatch = f"""
        INSERT INTO effects (
            key, run_id, task_id, step, tool, target, args_hash, state,
            created_at, updated_at, outcome
        )
        SELECT $3::text, $1::text, $4::text, $5::bigint, $6::text, $7::text, $8::text,
               'dispatched', $9::float8, $9::float8, NULL
        WHERE {_fence("$1::text", "$2::bigint", running=True)}
        ON CONFLICT (key) DO UPDATE
        SET run_id = excluded.run_id, step = excluded.step, state = 'dispatched',
            updated_at = excluded.updated_at, outcome = NULL
        WHERE effects.args_hash = excluded.args_hash
    """
    dispatch_check = """
        SELECT r.status, r.epoch, (SELECT e.args_hash FROM effects AS e WHERE e.key = $2)
        FROM runs AS r WHERE r.run_id = $1
    """
    settle_effect = """
        UPDATE effects SET state = $2, outcome = $3, updated_at = $4
        WHERE key = $1
    """
    settle_effect_fenced = f"""
        UPDATE effects SET state = $2, outcome = $3, updated_at = $4
        WHERE key = $1 AND {_fence("$5::text", "$6::bigint", running=False)}
    """
    effect_exists = "SELECT 1 FROM effects WHERE key = $1"
    effects = f"SELECT {EFFECT_COLUMNS} FROM effects"
    effects_order = "ORDER BY created_at, seq"
    effects_filters: Mapping[str, str] = {
        "task_id": "task_id = {}",
        "run_id": "run_id = {}",
        "states": "state = ANY({}::text[])",
    }

    add_evidence = """
        INSERT INTO evidence (
            run_id, task_id, candidate_digest, contract_version, check_name, passed,
            record, at
        )
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    """
    evidence = "SELECT record FROM evidence"
    evidence_order = "ORDER BY id"
    evidence_filters: Mapping[str, str] = {
        "task_id": "task_id = {}",
        "run_id": "run_id = {}",
    }

    # From the running totals (a trigger keeps them with every row), not the rows.
    spend_totals = """
        SELECT dimension, sum(total) FROM spend_totals
        WHERE task_id = $1 AND kind = ANY($2::text[])
        GROUP BY dimension ORDER BY dimension
    """

    # The rows of earlier versions (one per dimension) first, then the records
    # (see ``rows.spend_rows_of``).
    spend_rows = """
        SELECT 0, id, dimension, amount, kind, at FROM spend WHERE run_id = $1
        UNION ALL
        SELECT 1, id, amounts, NULL, kind, at FROM spend_records WHERE run_id = $1
        ORDER BY 1, 2
    """

    record_process = """
        INSERT INTO processes (run_id, pgid, command, started_at) VALUES ($1, $2, $3, $4)
    """
    end_process = """
        UPDATE processes SET ended_at = $4, how = $3
        WHERE seq = (
            SELECT seq FROM processes
            WHERE run_id = $1 AND pgid = $2 AND ended_at IS NULL
            ORDER BY started_at DESC LIMIT 1
        )
    """
    processes = """
        SELECT run_id, pgid, command, started_at, ended_at, how
        FROM processes WHERE run_id = $1 ORDER BY started_at, pgid
    """

    add_note = f"""
        WITH note AS (
            INSERT INTO notes (run_id, kind, body, at, packed) VALUES ($1, $2, $3, $4, $5)
            RETURNING id
        ),
        stored AS ({_put_blobs(6)})
        SELECT id FROM note
    """
    notes = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = $1 AND id > $2 ORDER BY id
    """
    notes_of_kinds = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = $1 AND id > $2 AND kind = ANY($3::text[]) ORDER BY id
    """
    count_effects = "SELECT count(*) FROM effects WHERE task_id = $1"
    effect_notes = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = $1 AND kind = 'effect'
        AND EXISTS (SELECT 1 FROM unnest($2::text[]) AS k (needle) WHERE strpos(body, needle) > 0)
        ORDER BY id
    """
    put_snapshot = """
        INSERT INTO snapshots (run_id, step, body, at) VALUES ($1, $2, $3, $4)
        ON CONFLICT (run_id) DO UPDATE
        SET step = excluded.step, body = excluded.body, at = excluded.at
    """
    snapshot = "SELECT body FROM snapshots WHERE run_id = $1"
    latest_note = """
        SELECT id, run_id, kind, body, at, packed FROM notes
        WHERE run_id = $1 AND kind = $2 ORDER BY id DESC LIMIT 1
    """

    # -- holders --------------------------------------------------------------------

    hold_task = """
        INSERT INTO holders (task_id, run_id, holder, since)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (task_id) DO UPDATE
        SET run_id = excluded.run_id, holder = excluded.holder, since = excluded.since
        WHERE holders.holder = $5
        RETURNING holder
    """
    task_holder = "SELECT task_id, run_id, holder, since FROM holders WHERE task_id = $1"
    release_task = "DELETE FROM holders WHERE task_id = $1 AND holder = $2"

    # -- leases ---------------------------------------------------------------------

    submit_run = """
        INSERT INTO runs (
            run_id, task_id, epoch, status, policy, policy_version, host, started_at
        )
        VALUES ($1, $2, 0, 'queued', $3, $4, '', $5)
    """
    # One statement: pick the oldest claimable run, skipping the rows other
    # claimers hold, and take it under an epoch above every epoch of its task.
    claim_run = f"""
        WITH pick AS (
            SELECT run_id, task_id, epoch FROM runs
            WHERE status IN ('queued', 'running')
              AND (status = 'queued' OR lease_until <= {NOW})
            ORDER BY started_at, seq
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        )
        UPDATE runs AS r
        SET epoch = (SELECT max(o.epoch) FROM runs AS o WHERE o.task_id = pick.task_id) + 1,
            status = 'running', owner = $1, host = $1,
            lease_until = {NOW} + $2::float8
        FROM pick
        WHERE r.run_id = pick.run_id
        RETURNING r.run_id, r.task_id, r.epoch, pick.epoch
    """
    renew_lease = f"""
        UPDATE runs SET lease_until = {NOW} + $3::float8
        WHERE run_id = $1 AND epoch = $2 AND status = 'running'
    """
    release_run = f"""
        UPDATE runs
        SET owner = NULL,
            lease_until = CASE WHEN status = 'running' THEN {NOW} ELSE NULL END
        WHERE run_id = $1 AND epoch = $2 AND status <> 'queued'
    """

    @staticmethod
    def filtered(
        select: str,
        filters: Mapping[str, str],
        present: Sequence[str],
        order: str,
    ) -> str:
        """Compose ``select`` with the filters named in ``present``, as $1, $2, ..."""
        clauses = [filters[name].format(f"${n}") for n, name in enumerate(present, 1)]
        where = " AND ".join(clauses)
        return f"{select} WHERE {where} {order}" if where else f"{select} {order}"


TABLES: tuple[str, ...] = (
    "proctor_schema",
    "tasks",
    "runs",
    "steps",
    "effects",
    "evidence",
    "spend",
    "spend_records",
    "processes",
    "notes",
    "snapshots",
    "blobs",
    "spend_totals",
)
