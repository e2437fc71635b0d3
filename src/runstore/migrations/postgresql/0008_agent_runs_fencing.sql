-- Agent runs with a queued state, leases and fencing tokens; thread and run listing orders;
-- client message ids and message metadata; the details of context checkpoints.
--
-- SQLite rebuilds agent_runs because its CHECK constraints and NOT NULL columns change (a run
-- can now be queued: not started yet, no lease); PostgreSQL alters the table in place, so
-- the foreign keys of agent_messages and agent_checkpoints are kept as they are. The columns
-- and rules are SQLite's.

-- Counters of the agent stores: dense, never reused (a rolled-back unit gives its value back).
--   thread_seq     Thread.seq, the order of listing threads
--   run_seq        AgentRun.seq, the order of listing runs
--   fencing_token  the fencing token of each claim of an agent run (one for the database)
CREATE TABLE agent_counters (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BIGINT NOT NULL CHECK (value >= 0)
);

-- Threads: their place in the creation order, the agent and the owner (the host's ids).
ALTER TABLE agent_threads ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agent_threads ADD COLUMN agent_id TEXT COLLATE "C";
ALTER TABLE agent_threads ADD COLUMN owner_id TEXT COLLATE "C";
UPDATE agent_threads SET seq = key;

CREATE UNIQUE INDEX agent_threads_listing ON agent_threads (project_id, seq);
CREATE INDEX agent_threads_by_agent ON agent_threads (project_id, agent_id, seq);
CREATE INDEX agent_threads_by_owner ON agent_threads (project_id, owner_id, seq);

-- Runs. A run written before this migration keeps its status and times; its seq is its key;
-- a running one gets a lease that expired when it started (so any worker may reclaim it)
-- and token 0.
ALTER TABLE agent_runs DROP CONSTRAINT agent_runs_status_check;
ALTER TABLE agent_runs DROP CONSTRAINT agent_runs_check;
ALTER TABLE agent_runs ADD COLUMN seq BIGINT;
ALTER TABLE agent_runs ADD COLUMN owner TEXT COLLATE "C";               -- the worker of the latest claim
ALTER TABLE agent_runs ADD COLUMN lease_expires_at_ms BIGINT;            -- set exactly while running
ALTER TABLE agent_runs ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0
    CHECK (fencing_token >= 0);
ALTER TABLE agent_runs ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0);
ALTER TABLE agent_runs ADD COLUMN queued_at_ms BIGINT;
ALTER TABLE agent_runs ALTER COLUMN started_at_ms DROP NOT NULL;         -- the first claim

UPDATE agent_runs SET
    seq = key,
    lease_expires_at_ms = CASE WHEN status = 'running' THEN started_at_ms END,
    attempts = 1,
    queued_at_ms = started_at_ms;

ALTER TABLE agent_runs ALTER COLUMN seq SET NOT NULL;
ALTER TABLE agent_runs ALTER COLUMN queued_at_ms SET NOT NULL;
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_seq_key UNIQUE (seq);
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_seq_check CHECK (seq >= 1);
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_finished_check
    CHECK ((status IN ('queued', 'running')) = (finished_at_ms IS NULL));
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_lease_check
    CHECK ((status = 'running') = (lease_expires_at_ms IS NOT NULL));
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_queued_check
    CHECK (status <> 'queued' OR started_at_ms IS NULL);
ALTER TABLE agent_runs ADD CONSTRAINT agent_runs_running_check
    CHECK (status <> 'running' OR started_at_ms IS NOT NULL);

DROP INDEX agent_runs_thread;
CREATE INDEX agent_runs_thread ON agent_runs (thread_key, seq);
-- agent_runs_execution and agent_runs_single_flight (at most one running run per thread)
-- stay as migration 0004 made them.

INSERT INTO agent_counters (name, value) VALUES
    ('thread_seq', (SELECT coalesce(max(key), 0) FROM agent_threads)),
    ('run_seq', (SELECT coalesce(max(key), 0) FROM agent_runs)),
    ('fencing_token', 0);

-- Messages: the caller's id of a message (unique per thread), and JSON metadata kept with the
-- body (NULL is the empty object), so that listing headers reads neither.
ALTER TABLE agent_messages ADD COLUMN client_id TEXT COLLATE "C";
ALTER TABLE agent_message_bodies ADD COLUMN metadata TEXT COLLATE "C";

CREATE UNIQUE INDEX agent_messages_client_id ON agent_messages (thread_key, client_id)
    WHERE client_id IS NOT NULL;

-- Checkpoints: why one was made, the summary's format version, the estimated input tokens
-- before and after it, and the model that wrote the summary.
ALTER TABLE agent_checkpoints ADD COLUMN reason TEXT COLLATE "C" NOT NULL DEFAULT 'manual';
ALTER TABLE agent_checkpoints ADD COLUMN format_version BIGINT NOT NULL DEFAULT 1
    CHECK (format_version >= 1);
ALTER TABLE agent_checkpoints ADD COLUMN tokens_before BIGINT CHECK (tokens_before >= 0);
ALTER TABLE agent_checkpoints ADD COLUMN tokens_after BIGINT CHECK (tokens_after >= 0);
ALTER TABLE agent_checkpoints ADD COLUMN summary_model TEXT COLLATE "C";
