-- A gather's steps (wf.gather, wf.map): its new queued members dispatched in one statement.

-- name: insert_dispatched_steps
-- A gather's new queued steps (%(steps)s, a JSON array of their rows), each inserted straight
-- into `scheduled` with its history row and its queue message (dispatch's `queue_messages`
-- fragment), and the run lease handed back unless a rerun was asked for: one statement however
-- many steps, so no message names an unwritten step. Returns whether the lease was released and
-- how many messages were written; no row (nothing written) once the run stopped running under
-- the pass.
WITH {lease_handed_back},
new_step AS (
    INSERT INTO {step} ({new_step_columns})
    SELECT item.id, lease.id, item.step_key, item.kind, item.function_name, item.data,
        %(scheduled)s, NULL, NULL, 1, item.attempt_limit, item.retries, item.retry_delay,
        item.timeout_ms, item.from_step_key, NULL, NULL, false, item.atomic, item.gather_key,
        NULL, NULL, NULL, NULL, item.created_at, item.created_at
    FROM lease, jsonb_to_recordset(%(steps)s::jsonb) AS item(
        id uuid, step_key text, kind text, function_name text, data jsonb,
        attempt_limit integer, retries integer, retry_delay text, timeout_ms integer,
        from_step_key text, atomic boolean, gather_key text, created_at timestamptz)
    RETURNING id, attempt, status, function_name, created_at
),
history AS (
    INSERT INTO {history} (step_id, attempt, status, dispatch, function_name, created_at,
        scheduled_at)
    SELECT id, attempt, status, %(queued)s, function_name, created_at, created_at FROM new_step
    RETURNING step_id
),
dispatched AS (SELECT step_id FROM history),
{queue_messages}
SELECT lease.released, (SELECT count(*) FROM queue_messages) AS messages,
    (SELECT count(*) FROM queue_woken) AS woken
FROM lease
