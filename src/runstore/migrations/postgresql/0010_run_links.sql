-- What links a test run to its surroundings: the files git called changed when the run
-- started, and the agent session the run was made for.
--
-- git_changed_truncated: NULL when the changed files are unknown (no git repository, git
-- missing or too slow, and every run recorded before this migration), 0 when
-- test_run_changed_files holds every changed path of the run, 1 when they were more than
-- the cap and only the first ones are kept.
ALTER TABLE test_runs ADD COLUMN git_changed_truncated BIGINT
    CHECK (git_changed_truncated IN (0, 1));
-- session_id: the agent session the run belongs to (RUNSTORE_SESSION_ID); NULL for none.
ALTER TABLE test_runs ADD COLUMN session_id TEXT COLLATE "C";

-- One row per changed path, in the order git printed them (ordinal from 0): the path
-- relative to the repository root, as git prints it, and its two-letter porcelain status.
CREATE TABLE test_run_changed_files (
    run_id   BIGINT  NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    ordinal  BIGINT  NOT NULL CHECK (ordinal >= 0),
    path     TEXT COLLATE "C" NOT NULL,
    status   TEXT COLLATE "C" NOT NULL CHECK (length(status) = 2),
    PRIMARY KEY (run_id, ordinal)
);

-- list_runs(session_id=...): the runs of one session, newest first, by an index.
CREATE INDEX test_runs_session ON test_runs (session_id, started_at_ms, id)
    WHERE session_id IS NOT NULL;
