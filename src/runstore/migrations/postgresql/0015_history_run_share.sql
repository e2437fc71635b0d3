-- The outage guard of the flaky verdict (FlakyPolicy): each history entry keeps its run's
-- executed items (passed, failed, xpassed, error) and failing items (failed, error) when
-- the run finished, so a run where most tests failed is told apart after it was pruned.
-- NULL when unknown (not an outage): rows of runs pruned before this migration. Rows whose
-- run is still stored are filled from its counts, which no longer change once it ended.
ALTER TABLE test_history ADD COLUMN run_executed BIGINT CHECK (run_executed >= 0);
ALTER TABLE test_history ADD COLUMN run_failing BIGINT CHECK (run_failing >= 0);

UPDATE test_history SET
    run_executed = (SELECT r.n_passed + r.n_failed + r.n_xpassed + r.n_error
                    FROM test_runs r WHERE r.id = test_history.run_id),
    run_failing = (SELECT r.n_failed + r.n_error FROM test_runs r WHERE r.id = test_history.run_id)
WHERE run_id IS NOT NULL;
