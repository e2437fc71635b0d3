-- Sessions: entries immutable in the database, and sessions listed by creation time.
--
-- Entries and their bodies are written once and never changed (a leaf move is a new `leaf`
-- entry, seed 004), so an UPDATE of either table is refused here as well as by the API, as
-- finished executions are (migration 0003). Deleting a whole session still cascades.
-- SQLite's RAISE(ABORT) is a constraint error; this one is too (SQLSTATE class 23), with
-- the same message.

CREATE FUNCTION session_entries_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'session entries are immutable' USING ERRCODE = '23000';
END;
$$;

CREATE TRIGGER session_entries_immutable
BEFORE UPDATE ON session_entries
FOR EACH ROW EXECUTE FUNCTION session_entries_immutable();

CREATE TRIGGER session_bodies_immutable
BEFORE UPDATE ON session_bodies
FOR EACH ROW EXECUTE FUNCTION session_entries_immutable();

-- list() is newest first by creation time (created_ms, then the store's key), with or
-- without a cwd. They replace the index that ordered by key only.
DROP INDEX sessions_cwd_key;
CREATE INDEX sessions_created ON sessions (created_ms, key);
CREATE INDEX sessions_cwd_created ON sessions (cwd, created_ms, key);
