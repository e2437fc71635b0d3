-- Fencing, idempotency and a retry policy for action runs.
-- Runs written before this migration have no idempotency key (NULL) and the default retry
-- policy of 3 attempts; their stored failures have no "code" or "retryable" key, which
-- readers take as code NULL and retryable false. No row is rewritten.

-- idempotency_key: the key the run was queued with, unique per execution; request_digest:
-- the sha256 (hex) of the request that queued it (NULL for runs queued before).
ALTER TABLE action_runs ADD COLUMN idempotency_key TEXT;
ALTER TABLE action_runs ADD COLUMN request_digest TEXT;
-- max_attempts: the retry policy, attempts in all (requeue is refused once attempt reaches it).
ALTER TABLE action_runs ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 3
    CHECK (max_attempts >= 1);

-- Idempotent queue: one action run per (execution, key).
CREATE UNIQUE INDEX action_runs_idempotency
    ON action_runs (execution_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Action runs are written only while their execution is running (claimed by a worker),
-- whatever code writes to the table; which worker may write is the fencing token's rule,
-- checked by the service.
CREATE TRIGGER action_runs_insert_needs_running_execution
BEFORE INSERT ON action_runs
WHEN (SELECT status FROM executions WHERE id = NEW.execution_id) IS NOT 'running'
BEGIN
    SELECT RAISE(ABORT, 'action runs are written only while their execution is running');
END;

CREATE TRIGGER action_runs_update_needs_running_execution
BEFORE UPDATE ON action_runs
WHEN (SELECT status FROM executions WHERE id = NEW.execution_id) IS NOT 'running'
BEGIN
    SELECT RAISE(ABORT, 'action runs are written only while their execution is running');
END;
