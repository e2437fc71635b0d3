-- Tree-shaped agent sessions (seed 004: the session format of the pi coding agent).
--
-- A session is a tree of immutable entries. Small, hot rows live in WITHOUT ROWID tables
-- clustered on their key (a path walk is one primary-key lookup per step); the entry bodies,
-- which can be large, live in an ordinary rowid table beside them. Sessions are numbered by a
-- counter (`key`, never reused); entries by the per-session counter `next_entry_seq`.

CREATE TABLE session_counters (
    name  TEXT COLLATE "C" PRIMARY KEY,
    value BIGINT NOT NULL CHECK (value >= 0)
);

INSERT INTO session_counters (name, value) VALUES ('sessions', 0);

CREATE TABLE sessions (
    id             TEXT COLLATE "C" PRIMARY KEY,
    key            BIGINT NOT NULL UNIQUE CHECK (key >= 1),
    cwd            TEXT COLLATE "C" NOT NULL,
    parent_session TEXT COLLATE "C",
    metadata       TEXT COLLATE "C" NOT NULL,
    created_ms     BIGINT NOT NULL,
    leaf_id        TEXT COLLATE "C",
    next_entry_seq BIGINT NOT NULL DEFAULT 1 CHECK (next_entry_seq >= 1)
    -- FOREIGN KEY (key, leaf_id) REFERENCES session_entries (session_key, id): added
    -- below, once session_entries exists (SQLite resolves foreign keys when used).
);

-- list(cwd=...) newest first. (The UNIQUE key index serves list() without a cwd and the
-- leaf foreign key, whose child columns (key, leaf_id) start with key.)
CREATE INDEX sessions_cwd_key ON sessions (cwd, key);

CREATE TABLE session_entries (
    session_key    BIGINT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    id             TEXT COLLATE "C" NOT NULL,
    seq            BIGINT NOT NULL CHECK (seq >= 1),
    parent_id      TEXT COLLATE "C",
    type           TEXT COLLATE "C" NOT NULL,
    timestamp_ms   BIGINT NOT NULL,
    -- The context state at this entry (model, thinking level, first kept entry of the newest
    -- compaction on its path), so build_context never walks past the compaction.
    model_provider TEXT COLLATE "C",
    model_id       TEXT COLLATE "C",
    thinking_level TEXT COLLATE "C" NOT NULL,
    anchor_id      TEXT COLLATE "C",
    PRIMARY KEY (session_key, id),
    FOREIGN KEY (session_key, parent_id) REFERENCES session_entries (session_key, id)
);

ALTER TABLE sessions ADD CONSTRAINT sessions_leaf
    FOREIGN KEY (key, leaf_id) REFERENCES session_entries (session_key, id);

-- children() and the parent foreign key (child columns session_key, parent_id).
CREATE INDEX session_entries_parent ON session_entries (session_key, parent_id, seq);

-- The append-only log of a session: seq -> entry and its JSON body. Its primary key makes
-- seq unique per session and serves entries(after_seq); the body is read only when needed.
CREATE TABLE session_bodies (
    session_key BIGINT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    seq         BIGINT NOT NULL CHECK (seq >= 1),
    entry_id    TEXT COLLATE "C" NOT NULL,
    body        TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_key, seq)
);

CREATE TABLE session_summaries (
    session_key     BIGINT PRIMARY KEY REFERENCES sessions (key) ON DELETE CASCADE,
    name            TEXT COLLATE "C",
    message_count   BIGINT NOT NULL DEFAULT 0,
    cached_tokens   BIGINT NOT NULL DEFAULT 0,
    uncached_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens    BIGINT NOT NULL DEFAULT 0,
    cost            TEXT COLLATE "C" NOT NULL DEFAULT '0',
    model_provider  TEXT COLLATE "C",
    model_id        TEXT COLLATE "C",
    thinking_level  TEXT COLLATE "C" NOT NULL DEFAULT 'off'
);

CREATE TABLE session_labels (
    session_key BIGINT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    target_id   TEXT COLLATE "C" NOT NULL,
    label       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_key, target_id)
);
