-- The execution ledger: executions, the action runs they contain, and their counters.
-- Times are epoch ms UTC; JSON values are stored as JSON text.

-- Sequences and fencing tokens: one row each, only ever incremented, never reused.
CREATE TABLE execution_counters (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BIGINT NOT NULL CHECK (value >= 0)
);

INSERT INTO execution_counters (name, value)
VALUES ('execution_seq', 0), ('action_run_seq', 0), ('fencing_token', 0);

CREATE TABLE executions (
    id                  TEXT COLLATE "C" PRIMARY KEY,
    project_id          TEXT COLLATE "C" NOT NULL,
    seq                 BIGINT NOT NULL UNIQUE,
    name                TEXT COLLATE "C" NOT NULL,
    status              TEXT COLLATE "C" NOT NULL
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    input               TEXT COLLATE "C" NOT NULL,
    output              TEXT COLLATE "C" NOT NULL,
    failure             TEXT COLLATE "C",
    parent_id           TEXT COLLATE "C" REFERENCES executions (id),
    metadata            TEXT COLLATE "C" NOT NULL,
    idempotency_key     TEXT COLLATE "C",
    request_digest      TEXT COLLATE "C" NOT NULL,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    started_at_ms       BIGINT,
    finished_at_ms      BIGINT,
    lease_owner         TEXT COLLATE "C",
    lease_expires_at_ms BIGINT,
    fencing_token       BIGINT NOT NULL DEFAULT 0,
    attempts            BIGINT NOT NULL DEFAULT 0,
    CHECK ((status = 'running') = (lease_expires_at_ms IS NOT NULL))
);

-- Idempotent create: one execution per (project, key).
CREATE UNIQUE INDEX executions_idempotency
    ON executions (project_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Listing by project, and by project and status (claim reads the queue through it).
CREATE INDEX executions_project_seq ON executions (project_id, seq);
CREATE INDEX executions_project_status_seq ON executions (project_id, status, seq);
-- Foreign-key child column.
CREATE INDEX executions_parent ON executions (parent_id);
-- Target of action_runs' (execution_id, project_id) foreign key.
CREATE UNIQUE INDEX executions_id_project ON executions (id, project_id);

-- Finished executions are immutable, whatever code writes to the table.
-- SQLite's RAISE(ABORT) is a constraint error; this one is too (SQLSTATE class 23).
CREATE FUNCTION executions_finished_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'finished executions are immutable' USING ERRCODE = '23000';
END;
$$;

CREATE TRIGGER executions_finished_immutable
BEFORE UPDATE ON executions
FOR EACH ROW WHEN (OLD.status IN ('succeeded', 'failed', 'cancelled'))
EXECUTE FUNCTION executions_finished_immutable();

CREATE TABLE action_runs (
    id                        TEXT COLLATE "C" PRIMARY KEY,
    project_id                TEXT COLLATE "C" NOT NULL,
    execution_id              TEXT COLLATE "C" NOT NULL,
    seq                       BIGINT NOT NULL UNIQUE,
    action_id                 TEXT COLLATE "C" NOT NULL,
    input                     TEXT COLLATE "C" NOT NULL,
    status                    TEXT COLLATE "C" NOT NULL
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    phase                     TEXT COLLATE "C" NOT NULL
        CHECK (phase IN ('queued', 'running', 'writeback', 'effects', 'finished')),
    attempt                   BIGINT NOT NULL CHECK (attempt >= 1),
    queued_at_ms              BIGINT NOT NULL,
    started_at_ms             BIGINT,
    finished_at_ms            BIGINT,
    writeback_status          TEXT COLLATE "C" CHECK (writeback_status IN ('succeeded', 'failed')),
    writeback_completed_at_ms BIGINT,
    writeback_result          TEXT COLLATE "C",
    writeback_failure         TEXT COLLATE "C",
    effects_status            TEXT COLLATE "C" CHECK (effects_status IN ('succeeded', 'failed')),
    effects_completed_at_ms   BIGINT,
    effects_failure           TEXT COLLATE "C",
    failure                   TEXT COLLATE "C",
    FOREIGN KEY (execution_id, project_id) REFERENCES executions (id, project_id)
);

-- Foreign-key child columns, also the per-execution listing.
CREATE INDEX action_runs_execution_seq ON action_runs (execution_id, project_id, seq);
CREATE INDEX action_runs_project_seq ON action_runs (project_id, seq);
CREATE INDEX action_runs_project_status_seq ON action_runs (project_id, status, seq);
