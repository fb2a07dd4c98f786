-- The queue's side of the engine's one-statement dispatch (engine/store/step_transitions.sql composes it
-- in): django-q2's ORM queue table, written as its ORM broker writes it.

-- name: queue_message
-- (fragment) CTE `queue_message`: the message %(queue_payload)s for queue %(queue_key)s, once
-- per row of the statement's CTE `dispatched`, announced on %(wake_channel)s at commit (an
-- idle pusher of that queue wakes, as after the broker's own enqueue).
queue_message AS (
    INSERT INTO {queue} (key, payload, lock)
    SELECT %(queue_key)s, %(queue_payload)s, %(queue_lock)s::timestamptz FROM dispatched
    RETURNING id, pg_notify(%(wake_channel)s, %(queue_key)s)
)

-- name: queue_messages
-- (fragment) CTEs `queue_messages`: the messages of %(queue_messages)s (a JSON array of
-- {step_id, key, payload}, in the order they are to run), each written once its step is in the
-- statement's CTE `dispatched`; and `queue_woken`: each queue they went to announced once on
-- %(wake_channel)s at commit (the statement must read it).
queue_messages AS (
    INSERT INTO {queue} (key, payload, lock)
    SELECT message.key, message.payload, %(queue_lock)s::timestamptz
    FROM ROWS FROM (
        jsonb_to_recordset(%(queue_messages)s::jsonb) AS (step_id uuid, key text, payload text)
    ) WITH ORDINALITY AS message(step_id, key, payload, position)
    JOIN dispatched ON dispatched.step_id = message.step_id
    ORDER BY message.position
    RETURNING id, key
),
queue_woken AS (
    SELECT pg_notify(%(wake_channel)s, key) FROM (SELECT DISTINCT key FROM queue_messages) AS queues
)

-- name: queue_run_messages
-- (fragment) CTEs `queue_run_messages`: the orchestrator messages of %(run_messages)s (a JSON
-- array of {run_id, key, payload}), each written once its run is in the statement's CTE
-- `started` (column id); and `run_queues_woken`: each queue they went to announced once on
-- %(wake_channel)s at commit (the statement must read it).
queue_run_messages AS (
    INSERT INTO {queue} (key, payload, lock)
    SELECT message.key, message.payload, %(queue_lock)s::timestamptz
    FROM ROWS FROM (
        jsonb_to_recordset(%(run_messages)s::jsonb) AS (run_id uuid, key text, payload text)
    ) WITH ORDINALITY AS message(run_id, key, payload, position)
    JOIN started ON started.id = message.run_id
    ORDER BY message.position
    RETURNING key
),
run_queues_woken AS (
    SELECT pg_notify(%(wake_channel)s, key)
    FROM (SELECT DISTINCT key FROM queue_run_messages) AS queues
)
