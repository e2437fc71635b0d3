-- Quarantine and fix checks (runstore.quarantine, `runstore quarantine check`). The SQLite
-- migration of the same number, translated.

-- Which items of a run a quarantine entry applied to in that run (the entry's node id or
-- pattern as the quarantine file named it). The rows go with their run; one per item.
CREATE TABLE test_quarantined (
    run_id  BIGINT NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    test_id BIGINT NOT NULL REFERENCES tests (id),
    entry   TEXT COLLATE "C" NOT NULL CHECK (entry <> ''),
    PRIMARY KEY (run_id, test_id)
);

-- The foreign key's child column: pruning collects tests nothing refers to.
CREATE INDEX test_quarantined_by_test ON test_quarantined (test_id);

-- The evidence of each fix check: the run that repeated the test (NULL once pruned; the
-- evidence outlives it), its executions and how many passed and failed, and whether the
-- test was released from quarantine. Listed newest first per project (and test).
CREATE TABLE fix_checks (
    id            BIGINT PRIMARY KEY,
    project       TEXT COLLATE "C" NOT NULL,
    nodeid        TEXT COLLATE "C" NOT NULL,
    run_id        BIGINT REFERENCES test_runs (id) ON DELETE SET NULL,
    executions    BIGINT NOT NULL CHECK (executions >= 1),
    passed        BIGINT NOT NULL CHECK (passed >= 0),
    failed        BIGINT NOT NULL CHECK (failed >= 0 AND passed + failed <= executions),
    released      BIGINT NOT NULL CHECK (released IN (0, 1)),
    checked_at_ms BIGINT NOT NULL
);

CREATE INDEX fix_checks_by_test ON fix_checks (project, nodeid, id);
CREATE INDEX fix_checks_by_run ON fix_checks (run_id);
