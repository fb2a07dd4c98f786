-- The PostgreSQL forms of the status changes a step makes on its hot paths, one statement (one
-- round trip, its own commit) each. The ORM forms in transitions.py are the reference: same
-- rows, same guards. Statuses come in as parameters (from status.py), never as literals.

-- name: new_step_values
-- (fragment) The values of a new step row (its parameters are the step's columns), in the
-- order of `new_step_columns`.
%(id)s::uuid, %(run_id)s::uuid, %(step_key)s, %(kind)s, %(function_name)s, %(data)s::jsonb,
%(status)s, %(result)s::jsonb, %(error)s::jsonb, %(attempt)s::integer,
%(attempt_limit)s::integer, %(retries)s::integer, %(retry_delay)s, %(timeout_ms)s::integer,
%(from_step_key)s, %(child_run_id)s::uuid, %(branch_taken)s, %(copied)s::boolean,
%(atomic)s::boolean, %(gather_key)s, %(not_before)s::timestamptz, %(admission_hold)s::jsonb,
-- A lease and a timer are set on the database clock (NULL seconds: none).
clock_timestamp() + make_interval(secs => %(lease_seconds)s::float8),
clock_timestamp() + make_interval(secs => %(wake_in_seconds)s::float8),
%(created_at)s::timestamptz, %(created_at)s::timestamptz

-- name: new_step_columns
-- (fragment) The columns `new_step_values` fills.
id, run_id, step_key, kind, function_name, data, status, result, error, attempt, attempt_limit,
retries, retry_delay, timeout_ms, from_step_key, child_run_id, branch_taken, copied, atomic,
gather_key, not_before, admission_hold, lease_expires_at, wake_at, created_at, updated_at

-- name: first_history_row
-- (fragment) CTE `history`: the history row of the new step's first attempt (CTE `new_step`),
-- stamped at the step's creation for its status, dispatched as %(dispatch)s, run by the process
-- %(worker)s (NULL unless it runs now), naming the step's function %(function_name)s.
history AS (
    INSERT INTO {history} (step_id, attempt, status, dispatch, worker, result, error, created_at,
        scheduled_at, running_at, waiting_at, succeeded_at, failed_at, function_name)
    SELECT id, attempt, status, %(dispatch)s, %(worker)s, result, error, created_at,
        %(scheduled_at)s::timestamptz,
        %(running_at)s::timestamptz, %(waiting_at)s::timestamptz,
        %(succeeded_at)s::timestamptz, %(failed_at)s::timestamptz, %(function_name)s
    FROM new_step
    RETURNING step_id
)

-- name: insert_step_in_run
-- Insert a step and its first attempt's history row into a run this pass holds; returns the
-- step's lease and timer, or no row (nothing written) once the run stopped running under it.
WITH guard AS ({run_held_by_pass}),
new_step AS (
    INSERT INTO {step} ({new_step_columns})
    SELECT {new_step_values} FROM guard
    RETURNING id, attempt, status, result, error, created_at, lease_expires_at, wake_at
),
{first_history_row}
SELECT lease_expires_at, wake_at FROM new_step

-- name: lease_handed_back
-- (fragment) CTE `lease`: the run %(run_id)s while it is running under this pass's lease
-- %(lease_holder)s, its lease handed back unless a rerun was asked for (`released`). The guard
-- and the release are one write: the run row stays locked until commit, so a cancel waits,
-- then finds what the statement wrote. Its list fields as the pass leaves it, parked on the
-- steps the statement inserts (invisible to this part of it: %(new_own_steps)s of them not the
-- engine's own, the newest %(current_step_key)s), which wait for a worker (%(waiting_step)s).
lease AS (
    UPDATE {run} SET
        lease_holder = CASE WHEN rerun_requested THEN lease_holder END,
        lease_expires_at = CASE WHEN rerun_requested THEN lease_expires_at END,
        steps_total = %(new_own_steps)s + (
            SELECT count(*) FROM {step}
            WHERE run_id = %(run_id)s AND step_key NOT LIKE %(engine_keys)s
        ),
        steps_done = (
            SELECT count(*) FROM {step}
            WHERE run_id = %(run_id)s AND status = %(succeeded)s AND step_key NOT LIKE %(engine_keys)s
        ),
        current_step_key = %(current_step_key)s,
        waiting_on = %(waiting_step)s
    WHERE id = %(run_id)s AND status = %(run_running)s AND lease_holder = %(lease_holder)s
    RETURNING id, NOT rerun_requested AS released
)

-- name: insert_dispatched_step
-- Insert a queued step straight into `scheduled` with its history row and its queue message
-- (dispatch's `queue_message` fragment), and hand the run lease back unless a rerun was asked
-- for: the message can never name an unwritten step. Returns whether the lease was released;
-- no row (nothing written) once the run stopped running under the pass.
WITH {lease_handed_back},
new_step AS (
    INSERT INTO {step} ({new_step_columns})
    SELECT {new_step_values} FROM lease
    RETURNING id, attempt, status, result, error, created_at
),
{first_history_row},
dispatched AS (SELECT step_id FROM history),
{queue_message}
SELECT lease.released, (SELECT count(*) FROM queue_message) AS messages FROM lease

-- name: step_outcome_ctes
-- (fragment) CTEs `moved` (the step %(outcome_step_id)s to %(outcome_status)s, fenced by its
-- attempt %(outcome_attempt)s and source statuses %(outcome_sources)s, with the branch it
-- chose, a retry's timer on the database clock) and `outcome_history` (that attempt's row,
-- stamped).
moved AS (
    UPDATE {step} SET status = %(outcome_status)s, result = %(outcome_result)s::jsonb,
        error = %(outcome_error)s::jsonb,
        attempt_limit = %(outcome_attempt_limit)s::integer,
        branch_taken = %(outcome_branch_taken)s, lease_expires_at = NULL,
        wake_at = clock_timestamp() + make_interval(secs => %(outcome_wake_in_seconds)s::float8),
        updated_at = clock_timestamp()
    WHERE id = %(outcome_step_id)s::uuid AND attempt = %(outcome_attempt)s::integer
        AND status = ANY(%(outcome_sources)s)
    RETURNING id, run_id, wake_at
),
outcome_history AS (
    UPDATE {history} SET status = %(outcome_status)s, result = %(outcome_result)s::jsonb,
        error = %(outcome_error)s::jsonb,
        succeeded_at = %(outcome_succeeded_at)s::timestamptz,
        failed_at = %(outcome_failed_at)s::timestamptz
    WHERE step_id = (SELECT id FROM moved) AND attempt = %(outcome_attempt)s::integer
    RETURNING step_id
)

-- name: record_step_outcome
-- Record an attempt's outcome on the step and its history row; returns the step's timer, or
-- no row (nothing written) when a newer attempt owns the step.
WITH {step_outcome_ctes}
SELECT wake_at FROM moved

-- name: record_outcome_and_insert_step
-- One commit per step in a pass: record the previous step's outcome (as `record_step_outcome`)
-- and, once it moved, insert the next step with its first history row into the run this pass
-- holds (as `insert_step_in_run`). One row: whether the outcome moved, the new step's lease and
-- timer (NULL, nothing inserted, once the run stopped running under the pass).
WITH {step_outcome_ctes},
guard AS ({run_held_by_pass}),
new_step AS (
    INSERT INTO {step} ({new_step_columns})
    SELECT {new_step_values} FROM guard WHERE EXISTS (SELECT 1 FROM moved)
    RETURNING id, attempt, status, result, error, created_at, lease_expires_at, wake_at
),
{first_history_row}
SELECT (SELECT count(*) FROM moved) AS outcome_moved, (SELECT count(*) FROM new_step),
    new_step.lease_expires_at, new_step.wake_at
FROM (SELECT 1) AS one LEFT JOIN new_step ON true

-- name: record_outcome_and_update_run
-- One commit for a pass's last step and the run's move (its end): record the step's outcome (as
-- `record_step_outcome`) and run `run_update`, the ORM's UPDATE of the run, which matches only
-- once the step moved. One row: whether the step moved, how many runs the UPDATE moved.
WITH {step_outcome_ctes},
ended AS ({{run_update}} RETURNING 1)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM ended)

-- name: record_step_outcome_taking_run_lease
-- `record_step_outcome`, and once the step moved, take its run's lease for %(lease_holder)s if
-- the run is running, the lease free or lapsed and the run row not locked right now (a claim
-- holding it: then the pass takes the lease itself after this commit). One row: the run as
-- leased (all NULL when not taken), whether the step moved, its timer.
WITH {step_outcome_ctes},
lease AS (
    UPDATE {run} SET lease_holder = %(lease_holder)s, rerun_requested = false,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(run_lease_seconds)s::float8),
        updated_at = clock_timestamp()
    WHERE id = (SELECT id FROM ({run_unlocked}) AS unlocked) AND status = %(run_running)s
        AND (lease_holder IS NULL OR lease_expires_at < clock_timestamp())
    RETURNING {run}.*
)
SELECT lease.*, (SELECT count(*) FROM moved) AS step_moved,
    (SELECT wake_at FROM moved) AS step_wake_at
FROM (SELECT 1) AS one LEFT JOIN lease ON true

-- name: claim_queued_step
-- A worker's claim of a queued step (pending or scheduled, %(sources)s; its function one this
-- worker has) of a running run: running under a fresh lease on the database clock, its
-- history row stamped (run by the process %(worker)s). Returns the step, the run's starter, its
-- workflow and when the attempt was queued, or no row.
WITH guard AS ({run_running_unlocked}),
claimed AS (
    UPDATE {step} SET status = %(running)s, wake_at = NULL, updated_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s::float8)
    -- Only a first claim of this attempt: a second claimer waits on the row another claim
    -- holds, then re-checks the status and matches nothing.
    WHERE run_id = (SELECT id FROM guard) AND step_key = %(step_key)s
        AND status = ANY(%(sources)s) AND function_name = ANY(%(function_names)s)
    RETURNING *
),
history AS (
    UPDATE {history} SET status = %(running)s, running_at = %(running_at)s::timestamptz,
        dispatch = %(queued)s, worker = %(worker)s
    WHERE step_id = (SELECT id FROM claimed) AND attempt = (SELECT attempt FROM claimed)
    RETURNING coalesce(scheduled_at, created_at) AS queued_at
)
SELECT claimed.*, (SELECT started_by FROM guard) AS started_by_name,
    (SELECT workflow FROM guard) AS workflow_name,
    (SELECT queued_at FROM history) AS attempt_queued_at
FROM claimed

-- name: hand_over_signal
-- Inside run %(run_id)s's lock, once a signal %(name)s is kept: the oldest signal of that name
-- no wait took handed to the oldest wait for it, as `deliver_signals_txn` hands it (the wait
-- succeeds with the signal's payload, its attempt's history row stamped %(now)s, the signal
-- consumed by it). One row (signal id, step id, step key, attempt), or none when either is
-- missing.
WITH wait AS (
    SELECT id, attempt FROM {step}
    WHERE run_id = %(run_id)s::uuid AND status = %(waiting)s AND kind = %(signal_kind)s
        AND data ->> 'signal' = %(name)s
    ORDER BY created_at, step_key
    LIMIT 1
),
kept AS (
    SELECT id, payload FROM {signal}
    WHERE run_id = %(run_id)s::uuid AND name = %(name)s AND consumed_at IS NULL
    ORDER BY id
    LIMIT 1
),
taken AS (
    UPDATE {step} AS step
    SET status = %(succeeded)s, updated_at = CLOCK_TIMESTAMP(), result = kept.payload,
        wake_at = NULL
    FROM wait, kept
    WHERE step.id = wait.id AND step.attempt = wait.attempt AND step.status = %(waiting)s
    RETURNING step.id, step.step_key, step.attempt
),
stamped AS (
    UPDATE {history} AS history
    SET status = %(succeeded)s, result = kept.payload, succeeded_at = %(now)s
    FROM taken, kept
    WHERE history.step_id = taken.id AND history.attempt = taken.attempt
),
consumed AS (
    UPDATE {signal} AS signal
    SET consumed_by_step_id = taken.id, consumed_at = CLOCK_TIMESTAMP()
    FROM taken, kept
    WHERE signal.id = kept.id AND signal.consumed_at IS NULL
)
SELECT kept.id, taken.id, taken.step_key, taken.attempt FROM taken, kept
