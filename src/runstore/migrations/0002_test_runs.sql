-- Test-run records (DataStore / DataReader). Times are epoch ms UTC, durations float ms.
-- Every foreign-key child column is indexed (a cascade over an unindexed child scans it).
-- Deleting a run cascades to everything of it; history rows and failure signatures keep
-- their data with a NULL run id. Listing columns of test_cases stay apart from payloads
-- (captured output, error texts), which live in their own tables.

-- One row per project per invocation. AUTOINCREMENT: a pruned run's id is never reused.
-- n_* are the item counts by outcome, maintained from the stored rows in the same unit
-- of work that changes those rows.
CREATE TABLE test_runs (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    project             TEXT    NOT NULL,
    invocation_id       TEXT    NOT NULL,
    status              TEXT    NOT NULL
                        CHECK (status IN ('running', 'passed', 'failed', 'interrupted', 'aborted')),
    started_at_ms       INTEGER NOT NULL,
    finished_at_ms      INTEGER,
    last_write_at_ms    INTEGER NOT NULL,
    python_version      TEXT    NOT NULL,
    pytest_version      TEXT    NOT NULL,
    platform            TEXT    NOT NULL,
    git_commit          TEXT,
    git_branch          TEXT,
    command_line        TEXT    NOT NULL,  -- JSON array of strings
    host                TEXT    NOT NULL,
    pid                 INTEGER,
    n_passed            INTEGER NOT NULL DEFAULT 0,
    n_failed            INTEGER NOT NULL DEFAULT 0,
    n_skipped           INTEGER NOT NULL DEFAULT 0,
    n_xfailed           INTEGER NOT NULL DEFAULT 0,
    n_xpassed           INTEGER NOT NULL DEFAULT 0,
    n_error             INTEGER NOT NULL DEFAULT 0,
    n_collection_errors INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX test_runs_by_project ON test_runs (project, started_at_ms, id);
CREATE INDEX test_runs_by_start ON test_runs (started_at_ms, id);
CREATE INDEX test_runs_by_invocation ON test_runs (invocation_id);
CREATE INDEX test_runs_running ON test_runs (project, last_write_at_ms)
    WHERE status = 'running';

-- Counters that must never go backwards (the history sequence: one value per finished run).
CREATE TABLE test_run_sequences (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

INSERT INTO test_run_sequences (name, value) VALUES ('history', 0);

-- Every file path a stored row refers to (module, frame, coverage), stored once.
CREATE TABLE files (
    id   INTEGER PRIMARY KEY,
    path TEXT    NOT NULL UNIQUE
) STRICT;

-- The identity of a test in a project; history and items refer to it.
CREATE TABLE tests (
    id      INTEGER PRIMARY KEY,
    project TEXT    NOT NULL,
    nodeid  TEXT    NOT NULL,
    UNIQUE (project, nodeid)
) STRICT;

-- The modules (files) a run recorded items or collection errors of.
CREATE TABLE test_modules (
    id      INTEGER PRIMARY KEY,
    run_id  INTEGER NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    file_id INTEGER NOT NULL REFERENCES files (id),
    UNIQUE (run_id, file_id)
) STRICT;

CREATE INDEX test_modules_by_file ON test_modules (file_id);

-- One item of one run. Phases are columns (setup, call, teardown: outcome, ms, reason).
CREATE TABLE test_cases (
    id               INTEGER PRIMARY KEY,
    run_id           INTEGER NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    test_id          INTEGER NOT NULL REFERENCES tests (id),
    module_id        INTEGER NOT NULL REFERENCES test_modules (id) ON DELETE CASCADE,
    outcome          TEXT    NOT NULL
                     CHECK (outcome IN ('passed', 'failed', 'skipped', 'xfailed', 'xpassed', 'error')),
    duration_ms      REAL    NOT NULL,
    name             TEXT    NOT NULL,
    parametrize_id   TEXT,
    line             INTEGER,
    markers          TEXT,  -- JSON array of strings; NULL when none
    setup_outcome    TEXT,
    setup_ms         REAL,
    setup_reason     TEXT,
    call_outcome     TEXT,
    call_ms          REAL,
    call_reason      TEXT,
    teardown_outcome TEXT,
    teardown_ms      REAL,
    teardown_reason  TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    UNIQUE (run_id, test_id)
) STRICT;

CREATE INDEX test_cases_by_test ON test_cases (test_id);
CREATE INDEX test_cases_by_module ON test_cases (module_id);
CREATE INDEX test_cases_failing ON test_cases (run_id) WHERE outcome IN ('failed', 'error');

-- Captured output of an item (payload), only when some stream is not empty.
CREATE TABLE test_output (
    case_id          INTEGER PRIMARY KEY REFERENCES test_cases (id) ON DELETE CASCADE,
    stdout           TEXT    NOT NULL,
    stdout_truncated INTEGER NOT NULL CHECK (stdout_truncated IN (0, 1)),
    stderr           TEXT    NOT NULL,
    stderr_truncated INTEGER NOT NULL CHECK (stderr_truncated IN (0, 1)),
    log              TEXT    NOT NULL,
    log_truncated    INTEGER NOT NULL CHECK (log_truncated IN (0, 1))
) STRICT;

-- Earlier rerun attempts of an item (ordinal 1 = the first attempt).
CREATE TABLE test_attempts (
    case_id          INTEGER NOT NULL REFERENCES test_cases (id) ON DELETE CASCADE,
    ordinal          INTEGER NOT NULL,
    outcome          TEXT    NOT NULL,
    duration_ms      REAL    NOT NULL,
    setup_outcome    TEXT,
    setup_ms         REAL,
    setup_reason     TEXT,
    call_outcome     TEXT,
    call_ms          REAL,
    call_reason      TEXT,
    teardown_outcome TEXT,
    teardown_ms      REAL,
    teardown_reason  TEXT,
    PRIMARY KEY (case_id, ordinal)
) STRICT, WITHOUT ROWID;

-- Subtests of an item (ordinal 0 = the first).
CREATE TABLE test_subtests (
    case_id     INTEGER NOT NULL REFERENCES test_cases (id) ON DELETE CASCADE,
    ordinal     INTEGER NOT NULL,
    description TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    duration_ms REAL    NOT NULL,
    PRIMARY KEY (case_id, ordinal)
) STRICT, WITHOUT ROWID;

-- Collectors (modules) that failed to collect.
CREATE TABLE collection_errors (
    id        INTEGER PRIMARY KEY,
    run_id    INTEGER NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    module_id INTEGER NOT NULL REFERENCES test_modules (id) ON DELETE CASCADE,
    nodeid    TEXT    NOT NULL,
    UNIQUE (run_id, nodeid)
) STRICT;

CREATE INDEX collection_errors_by_module ON collection_errors (module_id);

-- Errors of items, attempts, subtests and collectors. An owner's errors are numbered by
-- ordinal; each error's cause chain is rows of the same ordinal at depth 1, 2, ... linked
-- by cause_error_id. attempt 0 is the item's final result, k >= 1 its k-th attempt;
-- subtest is the subtest's ordinal (NULL otherwise). signature / signature_frame are set on
-- chain heads (depth 0).
CREATE TABLE test_errors (
    id                  INTEGER PRIMARY KEY,
    case_id             INTEGER REFERENCES test_cases (id) ON DELETE CASCADE,
    collection_error_id INTEGER REFERENCES collection_errors (id) ON DELETE CASCADE,
    attempt             INTEGER NOT NULL DEFAULT 0,
    subtest             INTEGER,
    ordinal             INTEGER NOT NULL,
    depth               INTEGER NOT NULL,
    cause_error_id      INTEGER REFERENCES test_errors (id) ON DELETE CASCADE,
    phase               TEXT    NOT NULL
                        CHECK (phase IN ('collect', 'setup', 'call', 'teardown')),
    exception_type      TEXT    NOT NULL,
    message             TEXT    NOT NULL,
    message_truncated   INTEGER NOT NULL CHECK (message_truncated IN (0, 1)),
    text                TEXT    NOT NULL,
    text_truncated      INTEGER NOT NULL CHECK (text_truncated IN (0, 1)),
    signature           TEXT,
    signature_frame     TEXT,
    CHECK ((case_id IS NULL) <> (collection_error_id IS NULL))
) STRICT;

CREATE INDEX test_errors_by_case ON test_errors (case_id, attempt, ordinal, depth)
    WHERE case_id IS NOT NULL;
CREATE INDEX test_errors_by_collection_error ON test_errors (collection_error_id)
    WHERE collection_error_id IS NOT NULL;
CREATE INDEX test_errors_by_cause ON test_errors (cause_error_id)
    WHERE cause_error_id IS NOT NULL;

-- Frames of an error, outermost first (ordinal 0).
CREATE TABLE stack_frames (
    error_id   INTEGER NOT NULL REFERENCES test_errors (id) ON DELETE CASCADE,
    ordinal    INTEGER NOT NULL,
    file_id    INTEGER NOT NULL REFERENCES files (id),
    line       INTEGER,
    function   TEXT    NOT NULL,
    is_project INTEGER NOT NULL CHECK (is_project IN (0, 1)),
    PRIMARY KEY (error_id, ordinal)
) STRICT, WITHOUT ROWID;

CREATE INDEX stack_frames_by_file ON stack_frames (file_id);

-- Failure signatures per project; they outlive the runs that saw them.
CREATE TABLE failure_signatures (
    project           TEXT    NOT NULL,
    signature         TEXT    NOT NULL,
    exception_type    TEXT    NOT NULL,
    message           TEXT    NOT NULL,  -- normalized
    frame             TEXT    NOT NULL,
    count             INTEGER NOT NULL,
    first_seen_run_id INTEGER REFERENCES test_runs (id) ON DELETE SET NULL,
    last_seen_run_id  INTEGER REFERENCES test_runs (id) ON DELETE SET NULL,
    first_seen_at_ms  INTEGER NOT NULL,
    last_seen_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (project, signature)
) STRICT, WITHOUT ROWID;

CREATE INDEX failure_signatures_by_first_run ON failure_signatures (first_seen_run_id);
CREATE INDEX failure_signatures_by_last_run ON failure_signatures (last_seen_run_id);

-- The newest executed outcomes per test (trimmed to the window by each finished run).
-- seq orders entries (one value per finished run); run_id is NULL once the run is pruned.
CREATE TABLE test_history (
    test_id        INTEGER NOT NULL REFERENCES tests (id),
    seq            INTEGER NOT NULL,
    run_id         INTEGER REFERENCES test_runs (id) ON DELETE SET NULL,
    outcome        TEXT    NOT NULL CHECK (outcome IN ('passed', 'failed', 'xpassed', 'error')),
    duration_ms    REAL    NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (test_id, seq)
) STRICT, WITHOUT ROWID;

CREATE INDEX test_history_by_run ON test_history (run_id);

-- Per-file coverage of a run; missing_lines are ranges "1-3,7".
CREATE TABLE file_coverage (
    run_id             INTEGER NOT NULL REFERENCES test_runs (id) ON DELETE CASCADE,
    file_id            INTEGER NOT NULL REFERENCES files (id),
    statements         INTEGER NOT NULL CHECK (statements >= 0),
    missing_statements INTEGER NOT NULL CHECK (missing_statements BETWEEN 0 AND statements),
    branches           INTEGER NOT NULL CHECK (branches >= 0),
    partial_branches   INTEGER NOT NULL CHECK (partial_branches BETWEEN 0 AND branches),
    missing_branches   INTEGER NOT NULL CHECK (missing_branches BETWEEN 0 AND branches),
    missing_lines      TEXT    NOT NULL,
    PRIMARY KEY (run_id, file_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX file_coverage_by_file ON file_coverage (file_id);
