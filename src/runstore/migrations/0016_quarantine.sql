-- Quarantine and fix checks (runstore.quarantine, `runstore quarantine check`).

-- Which items of a run a quarantine entry applied to in that run (the entry's node id or
-- pattern as the quarantine file named it). The rows go with their run; one per item.
CREATE TABLE test_quarantined (
    run_id  INTEGER NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    test_id INTEGER NOT NULL REFERENCES tests (id),
    entry   TEXT    NOT NULL CHECK (entry <> ''),
    PRIMARY KEY (run_id, test_id)
) STRICT, WITHOUT ROWID;

-- The foreign key's child column: pruning collects tests nothing refers to.
CREATE INDEX test_quarantined_by_test ON test_quarantined (test_id);

-- The evidence of each fix check: the run that repeated the test (NULL once pruned; the
-- evidence outlives it), its executions and how many passed and failed, and whether the
-- test was released from quarantine. Listed newest first per project (and test).
CREATE TABLE fix_checks (
    id            INTEGER PRIMARY KEY,
    project       TEXT    NOT NULL,
    nodeid        TEXT    NOT NULL,
    run_id        INTEGER REFERENCES test_runs (id) ON DELETE SET NULL,
    executions    INTEGER NOT NULL CHECK (executions >= 1),
    passed        INTEGER NOT NULL CHECK (passed >= 0),
    failed        INTEGER NOT NULL CHECK (failed >= 0 AND passed + failed <= executions),
    released      INTEGER NOT NULL CHECK (released IN (0, 1)),
    checked_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX fix_checks_by_test ON fix_checks (project, nodeid, id);
CREATE INDEX fix_checks_by_run ON fix_checks (run_id);
