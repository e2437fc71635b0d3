-- Evidence for the test-run verdicts: what a run selected, whether its work tree was dirty,
-- subtest totals, the "new" answer frozen when a run ends, and history rows that keep the
-- failure message, the commit, rerun failures and the failing streak beyond pruning.
-- Rows written before this migration get NULL (unknown) or 0, except what can be read back
-- from rows still stored: subtest totals of old runs, and the message, commit and rerun
-- failures of history rows whose run was not pruned. Old streaks stay NULL (readers walk
-- the history rows instead).

-- git_dirty: 1 when the work tree had uncommitted changes, 0 when clean, NULL when unknown.
ALTER TABLE test_runs ADD COLUMN git_dirty BIGINT CHECK (git_dirty IN (0, 1));
-- selection: JSON object of the run's Selection; NULL when nothing was narrowed or given.
ALTER TABLE test_runs ADD COLUMN selection TEXT COLLATE "C";
-- Stored subtests of the run's items by pytest's summary words, maintained with n_*.
ALTER TABLE test_runs ADD COLUMN n_subtests_passed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE test_runs ADD COLUMN n_subtests_failed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE test_runs ADD COLUMN n_subtests_skipped BIGINT NOT NULL DEFAULT 0;
-- new_signatures: JSON array of the failure signatures that were new in the run, frozen when
-- the run ended; NULL while running (and for runs that ended before this migration).
ALTER TABLE test_runs ADD COLUMN new_signatures TEXT COLLATE "C";

UPDATE test_runs SET
    n_subtests_passed = (
        SELECT count(*) FROM test_cases c JOIN test_subtests s ON s.case_id = c.id
        WHERE c.run_id = test_runs.id AND s.outcome IN ('passed', 'xpassed')),
    n_subtests_failed = (
        SELECT count(*) FROM test_cases c JOIN test_subtests s ON s.case_id = c.id
        WHERE c.run_id = test_runs.id AND s.outcome IN ('failed', 'error')),
    n_subtests_skipped = (
        SELECT count(*) FROM test_cases c JOIN test_subtests s ON s.case_id = c.id
        WHERE c.run_id = test_runs.id AND s.outcome IN ('skipped', 'xfailed'))
WHERE EXISTS (SELECT 1 FROM test_cases c JOIN test_subtests s ON s.case_id = c.id
              WHERE c.run_id = test_runs.id);

-- message: the first error message of a failing entry (NULL when passing or without error).
ALTER TABLE test_history ADD COLUMN message TEXT COLLATE "C";
ALTER TABLE test_history ADD COLUMN git_commit TEXT COLLATE "C";
ALTER TABLE test_history ADD COLUMN git_dirty BIGINT CHECK (git_dirty IN (0, 1));
-- rerun_failures: failing attempts before the final one in that run.
ALTER TABLE test_history ADD COLUMN rerun_failures BIGINT NOT NULL DEFAULT 0
    CHECK (rerun_failures >= 0);
-- The failing streak ending at a failing entry: its length, its first run (a plain id that
-- outlives the run; readers check whether that run still exists) and its first message.
-- NULL on passing entries and on entries written before this migration.
ALTER TABLE test_history ADD COLUMN streak BIGINT CHECK (streak >= 1);
ALTER TABLE test_history ADD COLUMN streak_since BIGINT;
ALTER TABLE test_history ADD COLUMN streak_message TEXT COLLATE "C";

UPDATE test_history SET
    message = CASE WHEN outcome IN ('failed', 'error') THEN (
        SELECT e.message FROM test_cases c JOIN test_errors e ON e.case_id = c.id
        WHERE c.run_id = test_history.run_id AND c.test_id = test_history.test_id
          AND e.attempt = 0 AND e.ordinal = 0 AND e.depth = 0 AND e.subtest IS NULL) END,
    git_commit = (SELECT r.git_commit FROM test_runs r WHERE r.id = test_history.run_id),
    rerun_failures = coalesce((
        SELECT count(*) FROM test_cases c JOIN test_attempts a ON a.case_id = c.id
        WHERE c.run_id = test_history.run_id AND c.test_id = test_history.test_id
          AND a.outcome IN ('failed', 'error')), 0)
WHERE run_id IS NOT NULL;
