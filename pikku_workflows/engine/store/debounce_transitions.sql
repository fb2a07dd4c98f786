-- name: join_debounced_run
-- The queued run of %(workflow)s whose debounce window key %(debounce_key)s holds (at most one:
-- the unique index `pikku_run_debounce_window`), made this start's: its input, idempotency key
-- and scope, starter, subject, trace, priority and concurrency key replaced, and its not_before
-- moved to %(quiet_ms)s ms from now on the database clock, but never past its
-- debounce_deadline (max_wait after its first start) and never earlier than it was (a rate's
-- time, a deadline already passed, stay). The UPDATE locks the row: concurrent joins take
-- turns, and a join the timer loop's admission is holding waits, then finds the run no longer
-- queued and joins nothing. Audited in the same statement (action %(action)s, by
-- %(started_by_id)s), which the event log records. Returns the run's id, or no row.
WITH joined AS (
    UPDATE {run} AS run SET input = %(input)s::jsonb,
        idempotency_key = %(idempotency_key)s, idempotency_scope = %(idempotency_scope)s,
        started_by_id = %(started_by_id)s, subject_type_id = %(subject_type_id)s,
        subject_id = %(subject_id)s, traceparent = %(traceparent)s,
        priority = %(priority)s::integer, concurrency_key = %(concurrency_key)s::text,
        not_before = GREATEST(run.not_before, LEAST(
            clock_timestamp() + make_interval(secs => %(quiet_ms)s::float8 / 1000),
            run.debounce_deadline
        )),
        updated_at = clock_timestamp()
    WHERE run.workflow = %(workflow)s::text AND run.debounce_key = %(debounce_key)s::text
        AND run.status = %(run_queued)s::text
    RETURNING run.id, run.status, run.not_before
),
audited AS (
    INSERT INTO {audit} (run_id, action, user_id, reason, payload, created_at)
    SELECT id, %(action)s::text, %(started_by_id)s, %(reason)s::text,
        jsonb_build_object('status_before', status, 'status_after', status,
            'key', %(debounce_key)s::text, 'not_before', not_before),
        clock_timestamp()
    FROM joined
)
SELECT id FROM joined
