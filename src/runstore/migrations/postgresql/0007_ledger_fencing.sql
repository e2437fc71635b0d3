-- Fencing, idempotency and a retry policy for action runs.
-- Runs written before this migration have no idempotency key (NULL) and the default retry
-- policy of 3 attempts; their stored failures have no "code" or "retryable" key, which
-- readers take as code NULL and retryable false. No row is rewritten.

-- idempotency_key: the key the run was queued with, unique per execution; request_digest:
-- the sha256 (hex) of the request that queued it (NULL for runs queued before).
ALTER TABLE action_runs ADD COLUMN idempotency_key TEXT COLLATE "C";
ALTER TABLE action_runs ADD COLUMN request_digest TEXT COLLATE "C";
-- max_attempts: the retry policy, attempts in all (requeue is refused once attempt reaches it).
ALTER TABLE action_runs ADD COLUMN max_attempts BIGINT NOT NULL DEFAULT 3
    CHECK (max_attempts >= 1);

-- Idempotent queue: one action run per (execution, key).
CREATE UNIQUE INDEX action_runs_idempotency
    ON action_runs (execution_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Action runs are written only while their execution is running (claimed by a worker),
-- whatever code writes to the table; which worker may write is the fencing token's rule,
-- checked by the service. SQLite's RAISE(ABORT) is a constraint error; this one is too
-- (SQLSTATE class 23). A missing execution is "not running" as on SQLite (NULL IS NOT
-- 'running'), so the trigger refuses it before the foreign key does.
CREATE FUNCTION action_runs_need_running_execution() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT status FROM executions WHERE id = NEW.execution_id)
        IS DISTINCT FROM 'running' THEN
        RAISE EXCEPTION 'action runs are written only while their execution is running'
            USING ERRCODE = '23000';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER action_runs_insert_needs_running_execution
BEFORE INSERT ON action_runs
FOR EACH ROW EXECUTE FUNCTION action_runs_need_running_execution();

CREATE TRIGGER action_runs_update_needs_running_execution
BEFORE UPDATE ON action_runs
FOR EACH ROW EXECUTE FUNCTION action_runs_need_running_execution();
