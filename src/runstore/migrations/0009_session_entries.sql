-- Sessions: entries immutable in the database, and sessions listed by creation time.
--
-- Entries and their bodies are written once and never changed (a leaf move is a new `leaf`
-- entry, seed 004), so an UPDATE of either table is refused here as well as by the API, as
-- finished executions are (migration 0003). Deleting a whole session still cascades.

CREATE TRIGGER session_entries_immutable
BEFORE UPDATE ON session_entries
BEGIN
    SELECT RAISE(ABORT, 'session entries are immutable');
END;

CREATE TRIGGER session_bodies_immutable
BEFORE UPDATE ON session_bodies
BEGIN
    SELECT RAISE(ABORT, 'session entries are immutable');
END;

-- list() is newest first by creation time (created_ms, then the store's key), with or
-- without a cwd. They replace the index that ordered by key only.
DROP INDEX sessions_cwd_key;
CREATE INDEX sessions_created ON sessions (created_ms, key);
CREATE INDEX sessions_cwd_created ON sessions (cwd, created_ms, key);
