-- Graph checkpoints (runstore.services.graphs): the saved states of a graph runtime's threads
-- (LangGraph's checkpoint savers), their channel values and their pending writes.
--
-- Every row belongs to an agent thread (agent_threads.key, thread_key here) and cascades from
-- it, so deleting a thread deletes its graph rows; the graph store deletes graph rows and
-- leaves the thread. Values are the runtime's serialized bytes with their type name; runstore
-- never reads them. Channel versions are stored as canonical JSON scalar text (1, 1.5,
-- "0001.7"), so a version comes back with its type.

-- One row per checkpoint of a thread's namespace ('' root, 'child:1', ...), ordered by the
-- runtime's checkpoint_id (its ids increase); the unique index is the latest read's.
CREATE TABLE graph_checkpoints (
    key                  INTEGER PRIMARY KEY,
    thread_key           INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    checkpoint_ns        TEXT    NOT NULL,
    checkpoint_id        TEXT    NOT NULL CHECK (checkpoint_id <> ''),
    parent_checkpoint_id TEXT,
    run_id               TEXT,                           -- metadata.run_id when it is text
    format_version       INTEGER NOT NULL CHECK (format_version >= 0),
    ts                   TEXT    NOT NULL,               -- the runtime's time stamp, as given
    state_type           TEXT    NOT NULL CHECK (state_type <> ''),
    state                BLOB    NOT NULL,               -- the rest of the checkpoint, serialized
    metadata             TEXT    NOT NULL,               -- JSON object
    created_at_ms        INTEGER NOT NULL,
    UNIQUE (thread_key, checkpoint_ns, checkpoint_id)
) STRICT;

-- delete_for_runs finds checkpoints by run across threads.
CREATE INDEX graph_checkpoints_run ON graph_checkpoints (run_id) WHERE run_id IS NOT NULL;

-- The version of each channel at a checkpoint, one row each.
CREATE TABLE graph_channel_versions (
    checkpoint_key INTEGER NOT NULL REFERENCES graph_checkpoints (key) ON DELETE CASCADE,
    channel        TEXT    NOT NULL,
    version        TEXT    NOT NULL,
    PRIMARY KEY (checkpoint_key, channel)
) STRICT, WITHOUT ROWID;

-- Collecting values no checkpoint names looks versions up by channel and version.
CREATE INDEX graph_channel_versions_value ON graph_channel_versions (channel, version);

-- Channel values, once per thread, namespace, channel and version, shared by every
-- checkpoint of the namespace that names that version.
CREATE TABLE graph_blobs (
    thread_key    INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    checkpoint_ns TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    value_type    TEXT    NOT NULL CHECK (value_type <> ''),
    value         BLOB    NOT NULL,
    PRIMARY KEY (thread_key, checkpoint_ns, channel, version)
) STRICT;

-- The pending writes of a checkpoint's tasks, keyed by task and index (a negative index is
-- a special channel's: error, scheduled, interrupt, resume); task_path orders them. A write
-- names its checkpoint by thread, namespace and id, with no reference to the checkpoint's
-- row: a graph runtime sends a task's writes while the put of their checkpoint may still be
-- on its way (LangGraph's savers store them the same way), and they are that checkpoint's
-- pending writes once it is put. The graph store deletes them with their checkpoint; they
-- cascade from the thread.
CREATE TABLE graph_writes (
    thread_key    INTEGER NOT NULL REFERENCES agent_threads (key) ON DELETE CASCADE,
    checkpoint_ns TEXT    NOT NULL,
    checkpoint_id TEXT    NOT NULL CHECK (checkpoint_id <> ''),
    task_id       TEXT    NOT NULL CHECK (task_id <> ''),
    idx           INTEGER NOT NULL,
    task_path     TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    value_type    TEXT    NOT NULL CHECK (value_type <> ''),
    value         BLOB    NOT NULL,
    PRIMARY KEY (thread_key, checkpoint_ns, checkpoint_id, task_id, idx)
) STRICT;
