-- Failure signatures across runs: how many runs and how many distinct tests each signature
-- affected, and the order in which signatures were last seen. finish_run maintains them in
-- the unit of work that adds a passed or failed run's signatures (interrupted and aborted
-- runs add none, as before); pruning a run changes none of them, since signatures outlive
-- runs.
-- Rows written before this migration get what the rows still stored tell: n_runs counts the
-- stored passed and failed runs that recorded the signature (at least 1: the row exists
-- because one did), n_tests the distinct node ids of those runs' items and collection
-- errors with it (0 when every such run was pruned before this migration), seen_seq the
-- order of last_seen_at_ms.

-- n_runs: passed and failed runs that recorded the signature; n_tests: its rows in
-- failure_signature_tests.
ALTER TABLE failure_signatures ADD COLUMN n_runs INTEGER NOT NULL DEFAULT 0 CHECK (n_runs >= 0);
ALTER TABLE failure_signatures ADD COLUMN n_tests INTEGER NOT NULL DEFAULT 0 CHECK (n_tests >= 0);
-- seen_seq: a value of the 'signature' sequence, taken each time a run records the
-- signature (one per signature per run, never reused); the signature listing is newest first
-- by it.
ALTER TABLE failure_signatures ADD COLUMN seen_seq INTEGER NOT NULL DEFAULT 0;

CREATE INDEX failure_signatures_by_seen ON failure_signatures (project, seen_seq);

-- The distinct tests (node ids of items and collection errors, kept as text so that they
-- outlive the runs and the tests rows pruning removes) each signature affected.
CREATE TABLE failure_signature_tests (
    project   TEXT NOT NULL,
    signature TEXT NOT NULL,
    nodeid    TEXT NOT NULL,
    PRIMARY KEY (project, signature, nodeid),
    FOREIGN KEY (project, signature) REFERENCES failure_signatures (project, signature)
) STRICT, WITHOUT ROWID;

-- The first error of every failing item and collection error of the stored passed and
-- failed runs whose signature the table holds, read once for the counts below.
CREATE TEMPORARY TABLE signature_heads AS
SELECT h.project, h.signature, h.run_id, h.nodeid FROM (
    SELECT r.project AS project, e.signature AS signature, r.id AS run_id, t.nodeid AS nodeid
    FROM test_runs r
    JOIN test_cases c ON c.run_id = r.id
    JOIN tests t ON t.id = c.test_id
    JOIN test_errors e ON e.case_id = c.id AND e.attempt = 0 AND e.ordinal = 0
        AND e.depth = 0 AND e.subtest IS NULL
    WHERE r.status IN ('passed', 'failed') AND c.outcome IN ('failed', 'error')
    UNION ALL
    SELECT r.project, e.signature, r.id, ce.nodeid
    FROM test_runs r
    JOIN collection_errors ce ON ce.run_id = r.id
    JOIN test_errors e ON e.collection_error_id = ce.id AND e.depth = 0
    WHERE r.status IN ('passed', 'failed')
) h
WHERE EXISTS (SELECT 1 FROM failure_signatures s
              WHERE s.project = h.project AND s.signature = h.signature);

INSERT INTO failure_signature_tests (project, signature, nodeid)
SELECT DISTINCT project, signature, nodeid FROM signature_heads;

UPDATE failure_signatures SET n_runs = found.n FROM (
    SELECT project, signature, count(DISTINCT run_id) AS n FROM signature_heads
    GROUP BY project, signature
) found
WHERE failure_signatures.project = found.project
  AND failure_signatures.signature = found.signature;

DROP TABLE signature_heads;

UPDATE failure_signatures SET n_runs = 1 WHERE n_runs = 0;

UPDATE failure_signatures SET n_tests = found.n FROM (
    SELECT project, signature, count(*) AS n FROM failure_signature_tests
    GROUP BY project, signature
) found
WHERE failure_signatures.project = found.project
  AND failure_signatures.signature = found.signature;

UPDATE failure_signatures SET seen_seq = ordered.n FROM (
    SELECT project, signature, row_number() OVER (
        ORDER BY last_seen_at_ms, coalesce(last_seen_run_id, 0), project, signature) AS n
    FROM failure_signatures
) ordered
WHERE failure_signatures.project = ordered.project
  AND failure_signatures.signature = ordered.signature;

INSERT INTO test_run_sequences (name, value)
SELECT 'signature', count(*) FROM failure_signatures;
