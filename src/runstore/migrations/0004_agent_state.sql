-- Agent state: threads, their runs, their messages and their context checkpoints.
--
-- Every row of this domain belongs to one thread: the tables carry its integer key
-- (agent_threads.key, thread_key elsewhere) and cascade from agent_threads, and a message
-- body's rowid is its thread's key * 2^32 + its seq, deleted with its header by a trigger.
-- So deleting a thread deletes every row of it. Text ids are the callers'; the integer keys
-- never leave the database.

CREATE TABLE agent_threads (
    key                INTEGER PRIMARY KEY CHECK (key BETWEEN 1 AND 2147483647),
    id                 TEXT NOT NULL UNIQUE,
    project_id         TEXT NOT NULL,
    title              TEXT NOT NULL,
    metadata           TEXT NOT NULL,                 -- JSON object
    status             TEXT NOT NULL CHECK (status IN ('open', 'archived')),
    head_seq           INTEGER NOT NULL DEFAULT 0 CHECK (head_seq >= 0),  -- last seq handed out
    message_count      INTEGER NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    last_message_at_ms INTEGER,                       -- created_at_ms of the highest stored seq
    checkpoint_count   INTEGER NOT NULL DEFAULT 0 CHECK (checkpoint_count >= 0),
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL
) STRICT;

CREATE TABLE agent_runs (
    key            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    thread_key     INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    execution_id   TEXT REFERENCES executions (id),   -- also checked in code (project, status)
    status         TEXT NOT NULL
                   CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    failure        TEXT,                              -- JSON object, for failed/cancelled runs
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    CHECK ((status = 'running') = (finished_at_ms IS NULL))
) STRICT;

CREATE INDEX agent_runs_thread ON agent_runs (thread_key);
CREATE INDEX agent_runs_execution ON agent_runs (execution_id);

-- Single flight: at most one running run per thread, whatever code path writes.
CREATE UNIQUE INDEX agent_runs_single_flight ON agent_runs (thread_key) WHERE status = 'running';

-- Message headers: small rows clustered by (thread, seq). Listing reads only these.
CREATE TABLE agent_messages (
    thread_key         INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    seq                INTEGER NOT NULL CHECK (seq BETWEEN 1 AND 4294967295),
    role               TEXT NOT NULL,
    run_key            INTEGER REFERENCES agent_runs (key),
    input_tokens       INTEGER NOT NULL CHECK (input_tokens >= 0),
    output_tokens      INTEGER NOT NULL CHECK (output_tokens >= 0),
    cache_read_tokens  INTEGER NOT NULL CHECK (cache_read_tokens >= 0),
    cache_write_tokens INTEGER NOT NULL CHECK (cache_write_tokens >= 0),
    cost               TEXT,                          -- exact decimal text, e.g. '0.00042'
    created_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (thread_key, seq)
) STRICT, WITHOUT ROWID;

CREATE INDEX agent_messages_run ON agent_messages (run_key);

-- Message bodies, apart from the headers so that no listing ever reads one it does not return.
-- The rowid is computed from the header (thread_key * 2^32 + seq): a body is one rowid lookup
-- away from its header and an append writes no extra index.
CREATE TABLE agent_message_bodies (
    id      INTEGER PRIMARY KEY,                      -- thread_key * 4294967296 + seq
    content TEXT NOT NULL                             -- JSON value
) STRICT;

CREATE TRIGGER agent_messages_delete_body AFTER DELETE ON agent_messages
BEGIN
    DELETE FROM agent_message_bodies WHERE id = old.thread_key * 4294967296 + old.seq;
END;

CREATE TABLE agent_checkpoints (
    key                 INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    thread_key          INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    number              INTEGER NOT NULL CHECK (number >= 1),  -- 1, 2, ... per thread
    run_key             INTEGER NOT NULL UNIQUE REFERENCES agent_runs (key),
    previous_id         TEXT,
    summary             TEXT NOT NULL,
    through_seq         INTEGER NOT NULL CHECK (through_seq >= 1),
    observed_head_seq   INTEGER NOT NULL CHECK (observed_head_seq >= through_seq),
    created_at_ms       INTEGER NOT NULL,
    UNIQUE (thread_key, number)
) STRICT;
