-- The statements of `SkipLockedOrmBroker` on PostgreSQL, over django-q2's ORM queue table.

-- name: enqueue_message
-- Insert message %(payload)s into queue %(queue)s (visible from %(lock)s) and announce it on
-- %(wake_channel)s at commit, so an idle pusher of that queue wakes; returns its id.
WITH message AS (
    INSERT INTO {queue} (key, payload, lock)
    VALUES (%(queue)s, %(payload)s, %(lock)s)
    RETURNING id
)
SELECT message.id FROM message, pg_notify(%(wake_channel)s, %(queue)s)

-- name: claim_messages
-- Claim up to %(bulk)s visible messages of queue %(queue)s, oldest first, hiding them until
-- %(hidden_until)s (django-q2's `retry`); returns (id, payload) of each.
UPDATE {queue} SET lock = %(hidden_until)s
WHERE id IN (
    SELECT id FROM {queue}
    -- Visible: never claimed, or its claim's `retry` window has passed.
    WHERE key = %(queue)s AND lock < %(now)s
    ORDER BY id
    LIMIT %(bulk)s
    -- Rows another dequeuer is claiming right now are its, not ours.
    FOR UPDATE SKIP LOCKED
)
RETURNING id, payload

-- name: delete_message
-- Delete message %(id)s (acknowledged), without the ORM's deletion collector.
DELETE FROM {queue} WHERE id = %(id)s
