-- Per-test coverage: which tests executed which lines of which files in a run (coverage.py's
-- dynamic contexts, one per test), sized for a run of thousands of tests over hundreds of
-- files: one row per (run, file, test), file paths and tests interned through files and
-- tests, the lines packed as ranges "1-3,7" (as file_coverage.missing_lines). Deleting a
-- run cascades to its rows. The SQLite migration of the same number, translated.

-- The runs measured per test (also those where no test executed a measured file), so that
-- tests_for tells "not measured" from "no test executed it". n_rows: its test_coverage rows.
CREATE TABLE test_coverage_runs (
    run_id BIGINT PRIMARY KEY REFERENCES test_runs (id) ON DELETE CASCADE,
    n_rows BIGINT NOT NULL CHECK (n_rows >= 0)
);

-- tests_for(project, path) reads, for each of a project's newest measured runs, the rows of
-- one file: a range of the primary key (run_id, file_id).
CREATE TABLE test_coverage (
    run_id  BIGINT NOT NULL REFERENCES test_coverage_runs (run_id) ON DELETE CASCADE,
    file_id BIGINT NOT NULL REFERENCES files (id),
    test_id BIGINT NOT NULL REFERENCES tests (id),
    lines   TEXT COLLATE "C" NOT NULL CHECK (lines <> ''),
    PRIMARY KEY (run_id, file_id, test_id)
);

-- The foreign keys' child columns: pruning collects files and tests nothing refers to.
CREATE INDEX test_coverage_by_file ON test_coverage (file_id);
CREATE INDEX test_coverage_by_test ON test_coverage (test_id);
