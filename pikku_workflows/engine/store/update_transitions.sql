-- Updates' statements (docs/long-lived-runs.md): each accept and each answer a fixed number of
-- round trips, whatever the run's history.

-- name: accept_update
-- Inside run %(run_id)s's lock: the id of the update %(update_id)s one run of the chain
-- %(chain)s (its runs' ids) holds already, if any (then nothing is written); else, when
-- %(open)s (the run takes updates) and the run holds fewer than %(limit)s updates no reply
-- answered, the update kept (%(name)s, %(payload)s, by user %(by)s) with the signal that carries
-- it (%(signal_name)s, %(message)s). One row: (existing id, pending count, new update's id,
-- its signal's id).
WITH existing AS (
    SELECT id FROM {update}
    WHERE run_id = ANY(%(chain)s::uuid[]) AND update_id = %(update_id)s
    LIMIT 1
),
pending AS (
    SELECT count(*) AS n FROM {update}
    WHERE run_id = %(run_id)s::uuid AND completed_at IS NULL
),
kept AS (
    INSERT INTO {signal} (run_id, name, payload, sent_by_id, created_at)
    SELECT %(run_id)s::uuid, %(signal_name)s, %(message)s::jsonb, %(by)s, %(now)s
    WHERE %(open)s AND NOT EXISTS (SELECT FROM existing) AND (SELECT n FROM pending) < %(limit)s
    RETURNING id
),
accepted AS (
    INSERT INTO {update} (run_id, name, update_id, payload, signal_id, sent_by_id, created_at)
    SELECT %(run_id)s::uuid, %(name)s, %(update_id)s, %(payload)s::jsonb, kept.id, %(by)s,
        %(now)s
    FROM kept
    RETURNING id, signal_id
)
SELECT (SELECT id FROM existing), (SELECT n FROM pending), accepted.id, accepted.signal_id
FROM (SELECT 1) AS one LEFT JOIN accepted ON true

-- name: announce_update
-- Inside run %(run_id)s's lock, once its update is kept and handed to the waits: the update's
-- audit row (%(action)s, %(audit)s, by user %(by)s, naming the step %(step_id)s that took it).
-- When a wait took it (%(taken)s): a pass waiting in place at the run's `wf.receive` is told on
-- %(receive_channel)s, and the run gets its next pass: from the live holder of its lease
-- (`rerun_requested`: the release of that lease waits for this commit, then sees it), else from
-- an orchestrator message (dispatch.sql `queue_run_messages`, announced at commit).
WITH audited AS (
    INSERT INTO {audit} (run_id, step_id, action, user_id, reason, payload, created_at)
    VALUES (%(run_id)s::uuid, %(step_id)s::uuid, %(action)s, %(by)s, '', %(audit)s::jsonb,
        %(now)s)
),
rerun AS (
    UPDATE {run} SET rerun_requested = true
    WHERE id = %(run_id)s::uuid AND %(taken)s AND status = %(running)s
        AND lease_holder IS NOT NULL AND lease_expires_at >= CLOCK_TIMESTAMP()
    RETURNING id
),
started AS (
    SELECT %(run_id)s::uuid AS id WHERE %(taken)s AND NOT EXISTS (SELECT FROM rerun)
),
{queue_run_messages}
SELECT pg_notify(%(receive_channel)s, '')
WHERE %(taken)s AND (SELECT count(*) FROM run_queues_woken) >= 0

-- name: answer_update
-- The answer %(result)s to update %(update_id)s of run %(run_id)s, once: written with its
-- audit row (%(action)s) and announced on its own channel (%(channel_prefix)s and its id; its
-- caller LISTENs there) at commit. Returns the update's id; no row when it was answered before
-- (nothing written).
WITH answered AS (
    UPDATE {update} SET result = %(result)s::jsonb, completed_at = CLOCK_TIMESTAMP()
    WHERE run_id = %(run_id)s::uuid AND update_id = %(update_id)s AND completed_at IS NULL
    RETURNING id, name
),
audited AS (
    INSERT INTO {audit} (run_id, step_id, action, user_id, reason, payload, created_at)
    SELECT %(run_id)s::uuid, NULL, %(action)s, NULL, '',
        jsonb_build_object('update', answered.name, 'update_id', %(update_id)s::text), %(now)s
    FROM answered
)
SELECT id, pg_notify(%(channel_prefix)s || id, '') FROM answered

-- name: wake_receiver
-- Tell a pass waiting in place at a run's `wf.receive` (it LISTENs on %(channel)s) that an
-- update was handed to it: delivered when this transaction commits, never before.
SELECT pg_notify(%(channel)s, '')
