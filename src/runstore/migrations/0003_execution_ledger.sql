-- The execution ledger: executions, the action runs they contain, and their counters.
-- Times are epoch ms UTC; JSON values are stored as JSON text.

-- Sequences and fencing tokens: one row each, only ever incremented, never reused.
CREATE TABLE execution_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL CHECK (value >= 0)
) STRICT, WITHOUT ROWID;

INSERT INTO execution_counters (name, value)
VALUES ('execution_seq', 0), ('action_run_seq', 0), ('fencing_token', 0);

CREATE TABLE executions (
    id                  TEXT PRIMARY KEY,
    project_id          TEXT NOT NULL,
    seq                 INTEGER NOT NULL UNIQUE,
    name                TEXT NOT NULL,
    status              TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    input               TEXT NOT NULL,
    output              TEXT NOT NULL,
    failure             TEXT,
    parent_id           TEXT REFERENCES executions (id),
    metadata            TEXT NOT NULL,
    idempotency_key     TEXT,
    request_digest      TEXT NOT NULL,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    started_at_ms       INTEGER,
    finished_at_ms      INTEGER,
    lease_owner         TEXT,
    lease_expires_at_ms INTEGER,
    fencing_token       INTEGER NOT NULL DEFAULT 0,
    attempts            INTEGER NOT NULL DEFAULT 0,
    CHECK ((status = 'running') = (lease_expires_at_ms IS NOT NULL))
) STRICT;

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
CREATE TRIGGER executions_finished_immutable
BEFORE UPDATE ON executions
WHEN OLD.status IN ('succeeded', 'failed', 'cancelled')
BEGIN
    SELECT RAISE(ABORT, 'finished executions are immutable');
END;

CREATE TABLE action_runs (
    id                        TEXT PRIMARY KEY,
    project_id                TEXT NOT NULL,
    execution_id              TEXT NOT NULL,
    seq                       INTEGER NOT NULL UNIQUE,
    action_id                 TEXT NOT NULL,
    input                     TEXT NOT NULL,
    status                    TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    phase                     TEXT NOT NULL
        CHECK (phase IN ('queued', 'running', 'writeback', 'effects', 'finished')),
    attempt                   INTEGER NOT NULL CHECK (attempt >= 1),
    queued_at_ms              INTEGER NOT NULL,
    started_at_ms             INTEGER,
    finished_at_ms            INTEGER,
    writeback_status          TEXT CHECK (writeback_status IN ('succeeded', 'failed')),
    writeback_completed_at_ms INTEGER,
    writeback_result          TEXT,
    writeback_failure         TEXT,
    effects_status            TEXT CHECK (effects_status IN ('succeeded', 'failed')),
    effects_completed_at_ms   INTEGER,
    effects_failure           TEXT,
    failure                   TEXT,
    FOREIGN KEY (execution_id, project_id) REFERENCES executions (id, project_id)
) STRICT;

-- Foreign-key child columns, also the per-execution listing.
CREATE INDEX action_runs_execution_seq ON action_runs (execution_id, project_id, seq);
CREATE INDEX action_runs_project_seq ON action_runs (project_id, seq);
CREATE INDEX action_runs_project_status_seq ON action_runs (project_id, status, seq);
