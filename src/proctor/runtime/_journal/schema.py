"""
The journal's schema: the SQLite migrations and the columns its queries read.

The PostgreSQL dialect's migrations stand beside them in this same file.
"""

from __future__ import annotations

import attrs

__all__ = (
    "EFFECT_COLUMNS",
    "PG_MIGRATIONS",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "SQLITE_MIGRATIONS",
    "STEP_COLUMNS",
    "SqliteMigration",
)


@attrs.frozen
class SqliteMigration:
    """
    One step of the schema.

    Args:
        columns: ``(table, column, declaration)`` to add where absent, first.
        script: then these statements, each idempotent (``IF NOT EXISTS``).
    """

    columns: tuple[tuple[str, str, str], ...] = ()
    script: str = ""


#: Migration N (1-based) brings a journal from user_version N-1 to N. They run
#: under the write lock, and every step is idempotent, so a journal migrated
#: concurrently by two processes, or migrated again, ends the same.
SQLITE_MIGRATIONS: tuple[SqliteMigration, ...] = (
    SqliteMigration(
        script="""
    CREATE TABLE IF NOT EXISTS tasks (
        task_id          TEXT PRIMARY KEY,
        goal             TEXT NOT NULL,
        spec             TEXT NOT NULL,
        contract_version TEXT NOT NULL,
        created_at       REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS runs (
        run_id           TEXT PRIMARY KEY,
        task_id          TEXT NOT NULL REFERENCES tasks (task_id),
        parent_run_id    TEXT REFERENCES runs (run_id),
        epoch            INTEGER NOT NULL,
        status           TEXT NOT NULL,
        disposition      TEXT,
        stop_reason      TEXT,
        policy           TEXT NOT NULL,
        policy_version   TEXT NOT NULL,
        host             TEXT NOT NULL,
        started_at       REAL NOT NULL,
        ended_at         REAL,
        candidate_digest TEXT,
        handoff          TEXT,
        UNIQUE (task_id, epoch)
    );
    CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_at);
    CREATE TABLE IF NOT EXISTS steps (
        run_id             TEXT NOT NULL REFERENCES runs (run_id),
        step               INTEGER NOT NULL,
        trace_id           TEXT NOT NULL,
        kind               TEXT NOT NULL,
        action             TEXT,
        tool_status        TEXT,
        result_fingerprint TEXT,
        state_version      INTEGER NOT NULL,
        state_delta        TEXT NOT NULL,
        remaining          TEXT NOT NULL,
        decision           TEXT NOT NULL,
        progress           INTEGER NOT NULL,
        reason             TEXT NOT NULL,
        stop_reason        TEXT,
        disposition        TEXT,
        policy_version     TEXT NOT NULL,
        at                 REAL NOT NULL,
        event              TEXT,
        extra              TEXT,
        PRIMARY KEY (run_id, step)
    );
    CREATE TABLE IF NOT EXISTS effects (
        key        TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL REFERENCES runs (run_id),
        task_id    TEXT NOT NULL REFERENCES tasks (task_id),
        step       INTEGER NOT NULL,
        tool       TEXT NOT NULL,
        target     TEXT NOT NULL,
        args_hash  TEXT NOT NULL,
        state      TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        outcome    TEXT
    );
    CREATE INDEX IF NOT EXISTS effects_by_task ON effects (task_id, state);
    CREATE INDEX IF NOT EXISTS effects_by_run ON effects (run_id);
    CREATE TABLE IF NOT EXISTS evidence (
        id               INTEGER PRIMARY KEY,
        run_id           TEXT NOT NULL REFERENCES runs (run_id),
        task_id          TEXT NOT NULL REFERENCES tasks (task_id),
        candidate_digest TEXT NOT NULL,
        contract_version TEXT NOT NULL,
        check_name       TEXT NOT NULL,
        passed           INTEGER NOT NULL,
        record           TEXT NOT NULL,
        at               REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS evidence_by_task ON evidence (task_id, candidate_digest);
    CREATE INDEX IF NOT EXISTS evidence_by_run ON evidence (run_id);
    CREATE TABLE IF NOT EXISTS spend (
        id        INTEGER PRIMARY KEY,
        task_id   TEXT NOT NULL REFERENCES tasks (task_id),
        run_id    TEXT NOT NULL REFERENCES runs (run_id),
        dimension TEXT NOT NULL,
        amount    REAL NOT NULL,
        kind      TEXT NOT NULL,
        note      TEXT NOT NULL,
        at        REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS spend_by_task ON spend (task_id, kind);
    CREATE TABLE IF NOT EXISTS processes (
        run_id     TEXT NOT NULL REFERENCES runs (run_id),
        pgid       INTEGER NOT NULL,
        command    TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at   REAL,
        how        TEXT,
        PRIMARY KEY (run_id, pgid, started_at)
    );
    CREATE TABLE IF NOT EXISTS notes (
        id     INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (run_id),
        kind   TEXT NOT NULL,
        body   TEXT NOT NULL,
        at     REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS notes_by_run ON notes (run_id);
    """
    ),
    # Leases: who owns a claimed run, and until when (seconds since the epoch, by
    # the database's clock). Queued runs and runs whose lease may have expired
    # are found through a partial index.
    SqliteMigration(
        columns=(("runs", "owner", "TEXT"), ("runs", "lease_until", "REAL")),
        script="""
        CREATE INDEX IF NOT EXISTS runs_claimable ON runs (started_at)
        WHERE status IN ('queued', 'running');
        """,
    ),
    # Snapshots of a run's decision core, one per run, each replacing the last;
    # notes found by kind.
    SqliteMigration(
        script="""
        CREATE TABLE IF NOT EXISTS snapshots (
            run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
            step   INTEGER NOT NULL,
            body   TEXT NOT NULL,
            at     REAL NOT NULL
        );
        CREATE INDEX IF NOT EXISTS notes_by_kind ON notes (run_id, kind, id);
        """,
    ),
    # Liveness: the process that runs a run, its heartbeat and how often it beats,
    # what it waits for (an answer, an approval) and since when, and the
    # workspace it holds. Running runs are found by workspace through a partial index.
    SqliteMigration(
        columns=(
            ("runs", "pid", "INTEGER"),
            ("runs", "heartbeat_at", "REAL"),
            ("runs", "heartbeat_every", "REAL"),
            ("runs", "waiting", "TEXT"),
            ("runs", "waiting_since", "REAL"),
            ("runs", "workspace", "TEXT"),
        ),
        script="""
        CREATE INDEX IF NOT EXISTS runs_live ON runs (workspace) WHERE status = 'running';
        """,
    ),
    # Holders: the one live host that runs a task's runs, for the run's life
    # (resume, run and worker all take it; a second host is refused by name).
    SqliteMigration(
        script="""
        CREATE TABLE IF NOT EXISTS holders (
            task_id TEXT PRIMARY KEY REFERENCES tasks (task_id),
            run_id  TEXT NOT NULL,
            holder  TEXT NOT NULL,
            since   REAL NOT NULL
        );
        """,
    ),
    # Blobs: large contents stored once, keyed by their digest, shared by the
    # steps, events and notes that refer to them (see ``blobs``); a note that
    # refers to one says so.
    SqliteMigration(
        columns=(("notes", "packed", "INTEGER"),),
        script="""
        CREATE TABLE IF NOT EXISTS blobs (
            digest TEXT PRIMARY KEY,
            body   BLOB NOT NULL
        );
        """,
    ),
    # Running totals of spend, per task, kind and dimension, kept by a trigger in
    # the transaction of every spend row: a task's spend is read from them, not
    # summed over its rows. The journal's rows so far are summed once.
    SqliteMigration(
        script="""
        CREATE TABLE IF NOT EXISTS spend_totals (
            task_id   TEXT NOT NULL,
            kind      TEXT NOT NULL,
            dimension TEXT NOT NULL,
            total     REAL NOT NULL,
            PRIMARY KEY (task_id, kind, dimension)
        ) WITHOUT ROWID;
        INSERT OR IGNORE INTO spend_totals (task_id, kind, dimension, total)
        SELECT task_id, kind, dimension, sum(amount) FROM spend
        GROUP BY task_id, kind, dimension;
        CREATE TRIGGER IF NOT EXISTS spend_running AFTER INSERT ON spend
        BEGIN
            INSERT INTO spend_totals (task_id, kind, dimension, total)
            VALUES (new.task_id, new.kind, new.dimension, new.amount)
            ON CONFLICT (task_id, kind, dimension) DO UPDATE SET total = total + excluded.total;
        END;
        """,
    ),
    # Spend as one row per record: its amounts, dimension to amount, in one JSON
    # column, which a trigger adds to the running totals dimension by dimension.
    # The task is NULL when it is the run's (it always is for the controller's
    # spend): the run says it. The rows of earlier versions (one per dimension, in
    # ``spend``) stay and are read as they are, their trigger with them, so that a
    # proctor of the version before that still runs keeps the totals; this one
    # writes none there. Their index served no read.
    SqliteMigration(
        script="""
        CREATE TABLE IF NOT EXISTS spend_records (
            id      INTEGER PRIMARY KEY,
            task_id TEXT REFERENCES tasks (task_id),
            run_id  TEXT NOT NULL REFERENCES runs (run_id),
            kind    TEXT NOT NULL,
            amounts TEXT NOT NULL,
            note    TEXT NOT NULL,
            at      REAL NOT NULL
        );
        CREATE TRIGGER IF NOT EXISTS spend_record_running AFTER INSERT ON spend_records
        BEGIN
            INSERT INTO spend_totals (task_id, kind, dimension, total)
            SELECT coalesce(new.task_id, (SELECT task_id FROM runs WHERE run_id = new.run_id)),
                   new.kind, a.key, a.value
            FROM json_each(new.amounts) AS a WHERE true
            ON CONFLICT (task_id, kind, dimension) DO UPDATE SET total = total + excluded.total;
        END;
        DROP INDEX IF EXISTS spend_by_task;
        """,
    ),
)

#: The schema version this proctor writes and understands.
SCHEMA_VERSION = len(SQLITE_MIGRATIONS)

RUN_COLUMNS = """
    r.run_id, r.task_id, r.parent_run_id, r.epoch, r.status, r.disposition,
    r.stop_reason, r.policy, r.policy_version, r.host, r.started_at, r.ended_at,
    r.candidate_digest, r.handoff, t.goal,
    (SELECT count(*) FROM steps AS s WHERE s.run_id = r.run_id), r.owner, r.lease_until,
    r.pid, r.heartbeat_at, r.heartbeat_every, r.waiting, r.waiting_since, r.workspace
    FROM runs AS r JOIN tasks AS t ON t.task_id = r.task_id
"""

STEP_COLUMNS = """
    trace_id, run_id, step, kind, action, tool_status, result_fingerprint,
    state_version, state_delta, remaining, decision, progress, reason,
    stop_reason, disposition, policy_version, at, event, extra
"""

EFFECT_COLUMNS = """
    key, run_id, task_id, step, tool, target, args_hash, state, created_at,
    updated_at, outcome
"""


# The PostgreSQL dialect of the same schema.

#: Migration N (1-based) brings a journal from version N-1 to N; every statement
#: is idempotent, so running one again changes nothing.
PG_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS tasks (
        task_id          text COLLATE "C" PRIMARY KEY,
        goal             text NOT NULL,
        spec             text NOT NULL,
        contract_version text NOT NULL,
        created_at       double precision NOT NULL
    );
    CREATE TABLE IF NOT EXISTS runs (
        seq              bigint GENERATED ALWAYS AS IDENTITY,
        run_id           text COLLATE "C" PRIMARY KEY,
        task_id          text COLLATE "C" NOT NULL REFERENCES tasks (task_id),
        parent_run_id    text COLLATE "C" REFERENCES runs (run_id),
        epoch            bigint NOT NULL,
        status           text NOT NULL,
        disposition      text,
        stop_reason      text,
        policy           text NOT NULL,
        policy_version   text NOT NULL,
        host             text NOT NULL,
        started_at       double precision NOT NULL,
        ended_at         double precision,
        candidate_digest text,
        handoff          text,
        CONSTRAINT runs_task_epoch UNIQUE (task_id, epoch)
    );
    CREATE INDEX IF NOT EXISTS runs_by_start ON runs (started_at, seq);
    CREATE TABLE IF NOT EXISTS steps (
        run_id             text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        step               bigint NOT NULL,
        trace_id           text NOT NULL,
        kind               text NOT NULL,
        action             text,
        tool_status        text,
        result_fingerprint text,
        state_version      bigint NOT NULL,
        state_delta        text NOT NULL,
        remaining          text NOT NULL,
        decision           text NOT NULL,
        progress           boolean NOT NULL,
        reason             text NOT NULL,
        stop_reason        text,
        disposition        text,
        policy_version     text NOT NULL,
        at                 double precision NOT NULL,
        event              text,
        extra              text,
        PRIMARY KEY (run_id, step)
    );
    CREATE TABLE IF NOT EXISTS effects (
        seq        bigint GENERATED ALWAYS AS IDENTITY,
        key        text COLLATE "C" PRIMARY KEY,
        run_id     text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        task_id    text COLLATE "C" NOT NULL REFERENCES tasks (task_id),
        step       bigint NOT NULL,
        tool       text NOT NULL,
        target     text NOT NULL,
        args_hash  text NOT NULL,
        state      text NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        outcome    text
    );
    CREATE INDEX IF NOT EXISTS effects_by_task ON effects (task_id, state);
    CREATE INDEX IF NOT EXISTS effects_by_run ON effects (run_id);
    CREATE TABLE IF NOT EXISTS evidence (
        id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id           text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        task_id          text COLLATE "C" NOT NULL REFERENCES tasks (task_id),
        candidate_digest text NOT NULL,
        contract_version text NOT NULL,
        check_name       text NOT NULL,
        passed           boolean NOT NULL,
        record           text NOT NULL,
        at               double precision NOT NULL
    );
    CREATE INDEX IF NOT EXISTS evidence_by_task ON evidence (task_id, candidate_digest);
    CREATE INDEX IF NOT EXISTS evidence_by_run ON evidence (run_id);
    CREATE TABLE IF NOT EXISTS spend (
        id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        task_id   text COLLATE "C" NOT NULL REFERENCES tasks (task_id),
        run_id    text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        dimension text COLLATE "C" NOT NULL,
        amount    double precision NOT NULL,
        kind      text NOT NULL,
        note      text NOT NULL,
        at        double precision NOT NULL
    );
    CREATE INDEX IF NOT EXISTS spend_by_task ON spend (task_id, kind);
    CREATE TABLE IF NOT EXISTS processes (
        seq        bigint GENERATED ALWAYS AS IDENTITY,
        run_id     text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        pgid       bigint NOT NULL,
        command    text NOT NULL,
        started_at double precision NOT NULL,
        ended_at   double precision,
        how        text,
        PRIMARY KEY (run_id, pgid, started_at)
    );
    CREATE TABLE IF NOT EXISTS notes (
        id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        kind   text NOT NULL,
        body   text NOT NULL,
        at     double precision NOT NULL
    );
    CREATE INDEX IF NOT EXISTS notes_by_run ON notes (run_id);
    """,
    # Leases: who owns a claimed run, and until when (seconds since the epoch, by
    # the server's clock).
    """
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner text;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS lease_until double precision;
    CREATE INDEX IF NOT EXISTS runs_claimable ON runs (started_at, seq)
    WHERE status IN ('queued', 'running');
    """,
    # Snapshots of a run's decision core, one per run, each replacing the last;
    # notes found by kind.
    """
    CREATE TABLE IF NOT EXISTS snapshots (
        run_id text COLLATE "C" PRIMARY KEY REFERENCES runs (run_id),
        step   bigint NOT NULL,
        body   text NOT NULL,
        at     double precision NOT NULL
    );
    CREATE INDEX IF NOT EXISTS notes_by_kind ON notes (run_id, kind, id);
    """,
    # Liveness: pid, heartbeat, what the run waits for, the workspace it holds.
    """
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS pid bigint;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS heartbeat_at double precision;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS heartbeat_every double precision;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS waiting text;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS waiting_since double precision;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS workspace text;
    CREATE INDEX IF NOT EXISTS runs_live ON runs (workspace) WHERE status = 'running';
    """,
    # Holders: the one live host that runs a task's runs, for the run's life.
    """
    CREATE TABLE IF NOT EXISTS holders (
        task_id text COLLATE "C" PRIMARY KEY REFERENCES tasks (task_id),
        run_id  text COLLATE "C" NOT NULL,
        holder  text NOT NULL,
        since   double precision NOT NULL
    );
    """,
    # Blobs: large contents stored once, keyed by their digest.
    """
    ALTER TABLE notes ADD COLUMN IF NOT EXISTS packed smallint;
    CREATE TABLE IF NOT EXISTS blobs (
        digest text COLLATE "C" PRIMARY KEY,
        body   bytea NOT NULL
    );
    """,
    # Running totals of spend, kept by a trigger in the transaction of every spend row.
    """
    CREATE TABLE IF NOT EXISTS spend_totals (
        task_id   text COLLATE "C" NOT NULL,
        kind      text NOT NULL,
        dimension text COLLATE "C" NOT NULL,
        total     double precision NOT NULL,
        PRIMARY KEY (task_id, kind, dimension)
    );
    INSERT INTO spend_totals (task_id, kind, dimension, total)
    SELECT task_id, kind, dimension, sum(amount) FROM spend
    GROUP BY task_id, kind, dimension
    ON CONFLICT DO NOTHING;
    CREATE OR REPLACE FUNCTION proctor_spend_running() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO spend_totals (task_id, kind, dimension, total)
        VALUES (NEW.task_id, NEW.kind, NEW.dimension, NEW.amount)
        ON CONFLICT (task_id, kind, dimension)
        DO UPDATE SET total = spend_totals.total + excluded.total;
        RETURN NULL;
    END
    $$;
    DROP TRIGGER IF EXISTS spend_running ON spend;
    CREATE TRIGGER spend_running AFTER INSERT ON spend
    FOR EACH ROW EXECUTE FUNCTION proctor_spend_running();
    """,
    # Spend as one row per record, its amounts in one JSON column that the trigger
    # adds dimension by dimension, its task NULL when it is the run's; the rows of
    # earlier versions stay, read as they are. The amounts are text, not jsonb:
    # jsonb would reorder the dimensions.
    """
    CREATE TABLE IF NOT EXISTS spend_records (
        id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        task_id text COLLATE "C" REFERENCES tasks (task_id),
        run_id  text COLLATE "C" NOT NULL REFERENCES runs (run_id),
        kind    text NOT NULL,
        amounts text NOT NULL,
        note    text NOT NULL,
        at      double precision NOT NULL
    );
    CREATE OR REPLACE FUNCTION proctor_spend_record_running() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO spend_totals (task_id, kind, dimension, total)
        SELECT coalesce(NEW.task_id, (SELECT r.task_id FROM runs AS r WHERE r.run_id = NEW.run_id)),
               NEW.kind, a.key, a.value::float8
        FROM json_each_text(NEW.amounts::json) AS a
        ON CONFLICT (task_id, kind, dimension)
        DO UPDATE SET total = spend_totals.total + excluded.total;
        RETURN NULL;
    END
    $$;
    DROP TRIGGER IF EXISTS spend_record_running ON spend_records;
    CREATE TRIGGER spend_record_running AFTER INSERT ON spend_records
    FOR EACH ROW EXECUTE FUNCTION proctor_spend_record_running();
    DROP INDEX IF EXISTS spend_by_task;
    """,
)

if len(PG_MIGRATIONS) != SCHEMA_VERSION:  # pragma: no cover - a guard for whoever adds one
    raise AssertionError("the PostgreSQL and SQLite journals must have the same schema version")
