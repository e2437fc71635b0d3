-- Agent runs with a queued state, leases and fencing tokens; thread and run listing orders;
-- client message ids and message metadata; the details of context checkpoints.
--
-- agent_runs is rebuilt, because its CHECK constraints and NOT NULL columns change (a run can
-- now be queued: not started yet, no lease). Foreign keys of agent_messages and
-- agent_checkpoints point at agent_runs (key); the keys are kept, and the checks are deferred
-- to the commit, by which time every old key exists again in the new table.

PRAGMA defer_foreign_keys = ON;

-- Counters of the agent stores: dense, never reused (a rolled-back unit gives its value back).
--   thread_seq     Thread.seq, the order of listing threads
--   run_seq        AgentRun.seq, the order of listing runs
--   fencing_token  the fencing token of each claim of an agent run (one for the database)
CREATE TABLE agent_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL CHECK (value >= 0)
) STRICT;

-- Threads: their place in the creation order, the agent and the owner (the host's ids).
ALTER TABLE agent_threads ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agent_threads ADD COLUMN agent_id TEXT;
ALTER TABLE agent_threads ADD COLUMN owner_id TEXT;
UPDATE agent_threads SET seq = key;

CREATE UNIQUE INDEX agent_threads_listing ON agent_threads (project_id, seq);
CREATE INDEX agent_threads_by_agent ON agent_threads (project_id, agent_id, seq);
CREATE INDEX agent_threads_by_owner ON agent_threads (project_id, owner_id, seq);

-- Runs, rebuilt. A run written before this migration keeps its status and times; its seq is
-- its key; a running one gets a lease that expired when it started (so any worker may
-- reclaim it) and token 0.
CREATE TABLE agent_runs_0007 AS SELECT * FROM agent_runs;
DROP TABLE agent_runs;

CREATE TABLE agent_runs (
    key                 INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    thread_key          INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    seq                 INTEGER NOT NULL UNIQUE CHECK (seq >= 1),
    execution_id        TEXT REFERENCES executions (id),   -- also checked in code
    status              TEXT NOT NULL
                        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    owner               TEXT,                              -- the worker of the latest claim
    lease_expires_at_ms INTEGER,                           -- set exactly while running
    fencing_token       INTEGER NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    attempts            INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    failure             TEXT,                              -- JSON object, failed/cancelled runs
    queued_at_ms        INTEGER NOT NULL,
    started_at_ms       INTEGER,                           -- the first claim
    finished_at_ms      INTEGER,
    CHECK ((status IN ('queued', 'running')) = (finished_at_ms IS NULL)),
    CHECK ((status = 'running') = (lease_expires_at_ms IS NOT NULL)),
    CHECK (status <> 'queued' OR started_at_ms IS NULL),
    CHECK (status <> 'running' OR started_at_ms IS NOT NULL)
) STRICT;

INSERT INTO agent_runs (key, id, thread_key, seq, execution_id, status, owner,
                        lease_expires_at_ms, fencing_token, attempts, failure, queued_at_ms,
                        started_at_ms, finished_at_ms)
SELECT key, id, thread_key, key, execution_id, status, NULL,
       CASE WHEN status = 'running' THEN started_at_ms END, 0, 1, failure, started_at_ms,
       started_at_ms, finished_at_ms
FROM agent_runs_0007 ORDER BY key;

DROP TABLE agent_runs_0007;

CREATE INDEX agent_runs_thread ON agent_runs (thread_key, seq);
CREATE INDEX agent_runs_execution ON agent_runs (execution_id);

-- Single flight: at most one running run per thread, whatever code path writes.
CREATE UNIQUE INDEX agent_runs_single_flight ON agent_runs (thread_key) WHERE status = 'running';

INSERT INTO agent_counters (name, value) VALUES
    ('thread_seq', (SELECT coalesce(max(key), 0) FROM agent_threads)),
    ('run_seq', (SELECT coalesce(max(key), 0) FROM agent_runs)),
    ('fencing_token', 0);

-- Messages: the caller's id of a message (unique per thread), and JSON metadata kept with the
-- body (NULL is the empty object), so that listing headers reads neither.
ALTER TABLE agent_messages ADD COLUMN client_id TEXT;
ALTER TABLE agent_message_bodies ADD COLUMN metadata TEXT;

CREATE UNIQUE INDEX agent_messages_client_id ON agent_messages (thread_key, client_id)
    WHERE client_id IS NOT NULL;

-- Checkpoints: why one was made, the summary's format version, the estimated input tokens
-- before and after it, and the model that wrote the summary.
ALTER TABLE agent_checkpoints ADD COLUMN reason TEXT NOT NULL DEFAULT 'manual';
ALTER TABLE agent_checkpoints ADD COLUMN format_version INTEGER NOT NULL DEFAULT 1
    CHECK (format_version >= 1);
ALTER TABLE agent_checkpoints ADD COLUMN tokens_before INTEGER CHECK (tokens_before >= 0);
ALTER TABLE agent_checkpoints ADD COLUMN tokens_after INTEGER CHECK (tokens_after >= 0);
ALTER TABLE agent_checkpoints ADD COLUMN summary_model TEXT;
