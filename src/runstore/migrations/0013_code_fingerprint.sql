-- The code fingerprint of each test in each run: a hex digest over the contents of the code
-- the test ran (its module, the conftest.py files on its path and the project files it
-- executed or loaded; runstore.recorder._fingerprint), so that a test that passed and failed
-- on one fingerprint is flaky evidence without git. NULL when unknown: rows written before
-- this migration, and items recorded without one. History keeps it beyond pruning, as it
-- keeps git_commit.
ALTER TABLE test_cases ADD COLUMN fingerprint TEXT;
ALTER TABLE test_history ADD COLUMN fingerprint TEXT;
