-- Tree-shaped agent sessions (seed 004: the session format of the pi coding agent).
--
-- A session is a tree of immutable entries. Small, hot rows live in WITHOUT ROWID tables
-- clustered on their key (a path walk is one primary-key lookup per step); the entry bodies,
-- which can be large, live in an ordinary rowid table beside them. Sessions are numbered by a
-- counter (`key`, never reused); entries by the per-session counter `next_entry_seq`.

CREATE TABLE session_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL CHECK (value >= 0)
) STRICT, WITHOUT ROWID;

INSERT INTO session_counters (name, value) VALUES ('sessions', 0);

CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    key            INTEGER NOT NULL UNIQUE CHECK (key >= 1),
    cwd            TEXT NOT NULL,
    parent_session TEXT,
    metadata       TEXT NOT NULL,
    created_ms     INTEGER NOT NULL,
    leaf_id        TEXT,
    next_entry_seq INTEGER NOT NULL DEFAULT 1 CHECK (next_entry_seq >= 1),
    FOREIGN KEY (key, leaf_id) REFERENCES session_entries (session_key, id)
) STRICT, WITHOUT ROWID;

-- list(cwd=...) newest first. (The UNIQUE key index serves list() without a cwd and the
-- leaf foreign key, whose child columns (key, leaf_id) start with key.)
CREATE INDEX sessions_cwd_key ON sessions (cwd, key);

CREATE TABLE session_entries (
    session_key    INTEGER NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    id             TEXT NOT NULL,
    seq            INTEGER NOT NULL CHECK (seq >= 1),
    parent_id      TEXT,
    type           TEXT NOT NULL,
    timestamp_ms   INTEGER NOT NULL,
    -- The context state at this entry (model, thinking level, first kept entry of the newest
    -- compaction on its path), so build_context never walks past the compaction.
    model_provider TEXT,
    model_id       TEXT,
    thinking_level TEXT NOT NULL,
    anchor_id      TEXT,
    PRIMARY KEY (session_key, id),
    FOREIGN KEY (session_key, parent_id) REFERENCES session_entries (session_key, id)
) STRICT, WITHOUT ROWID;

-- children() and the parent foreign key (child columns session_key, parent_id).
CREATE INDEX session_entries_parent ON session_entries (session_key, parent_id, seq);

-- The append-only log of a session: seq -> entry and its JSON body. Its primary key makes
-- seq unique per session and serves entries(after_seq); the body is read only when needed.
CREATE TABLE session_bodies (
    session_key INTEGER NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    entry_id    TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (session_key, seq)
) STRICT;

CREATE TABLE session_summaries (
    session_key     INTEGER PRIMARY KEY REFERENCES sessions (key) ON DELETE CASCADE,
    name            TEXT,
    message_count   INTEGER NOT NULL DEFAULT 0,
    cached_tokens   INTEGER NOT NULL DEFAULT 0,
    uncached_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens    INTEGER NOT NULL DEFAULT 0,
    cost            TEXT NOT NULL DEFAULT '0',
    model_provider  TEXT,
    model_id        TEXT,
    thinking_level  TEXT NOT NULL DEFAULT 'off'
) STRICT, WITHOUT ROWID;

CREATE TABLE session_labels (
    session_key INTEGER NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    target_id   TEXT NOT NULL,
    label       TEXT NOT NULL,
    PRIMARY KEY (session_key, target_id)
) STRICT, WITHOUT ROWID;
