-- name: insert_run
-- Upsert the run's workflow version and insert the run: queued when %(buffered)s (its
-- schedule admits it), or until %(not_before)s when a rate holds it that long; else admitted unless rule %(rule)s (a
-- concurrency rule, or NULL: none) already has %(max_active)s slots taken for key
-- %(concurrency_key)s: an admitted run takes its slot and, when %(lease_holder)s and
-- %(lease_seconds)s are given, is born leased for that long on the database clock; a run not
-- admitted gets %(status_when_full)s (queued, or cancelled with %(error_when_full)s). One
-- statement (the key's count row, claims.sql `take_slot`, stays locked until it commits);
-- returns the status it got, and whether the rule refused it a slot. (VALUES take their types from the columns: a user model's key may be any type.)
-- A run with %(debounce_key)s opens its key's debounce window: it is queued (no slot asked:
-- %(rule)s is NULL for it) until %(debounce_quiet_ms)s ms from now on the database clock, or
-- %(not_before)s if later, and its debounce_deadline is %(debounce_max_wait_ms)s ms from now
-- (NULL: none). When a window of the key is already open (another start's, committed or
-- committing: waited for), nothing is inserted and no row returned: the start joins that one.
WITH version AS (
    INSERT INTO {version} (name, graph_hash, code_version, definition, kind, status, created_at)
    VALUES (%(version_name)s, %(version_graph_hash)s, %(version_code_version)s,
        %(version_definition)s::jsonb, %(version_kind)s, %(version_status)s,
        %(version_created_at)s::timestamptz)
    ON CONFLICT DO NOTHING
),
taken AS ({take_slot}),
verdict AS (
    SELECT due AND (%(rule)s::text IS NULL OR EXISTS (SELECT 1 FROM taken)) AS admitted,
        due AND %(rule)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taken) AS refused
    FROM (
        SELECT %(debounce_key)s::text IS NULL AND NOT %(buffered)s::boolean
            AND (%(not_before)s::timestamptz IS NULL
            OR %(not_before)s::timestamptz <= statement_timestamp()) AS due
    ) AS timing
),
inserted AS (
    INSERT INTO {run} (id, workflow, status, input, output, error, state, planned_steps,
        graph_hash, code_version, inline, idempotency_key, idempotency_scope, started_by_id,
        subject_type_id, subject_id, parent_run_id, parent_step_id, forked_from_id,
        continued_from_id, lease_holder, lease_expires_at, rerun_requested, wake_at, random_seed, compensation,
        compensation_cause, concurrency_key, priority, not_before, debounce_key,
        debounce_deadline, retention_hold, steps_total,
        steps_done, current_step_key, waiting_on, last_error_code, schedule_id, scheduled_for,
        traceparent, created_at, updated_at, finished_at)
    SELECT %(id)s::uuid, %(workflow)s::text,
        CASE WHEN admitted THEN %(status)s::text
            WHEN refused THEN %(status_when_full)s::text ELSE %(run_queued)s::text END,
        %(input)s::jsonb, %(output)s::jsonb,
        CASE WHEN refused THEN %(error_when_full)s::jsonb ELSE %(error)s::jsonb END,
        %(state)s::jsonb, %(planned_steps)s::jsonb, %(graph_hash)s, %(code_version)s,
        %(inline)s::boolean, %(idempotency_key)s, %(idempotency_scope)s, %(started_by_id)s,
        %(subject_type_id)s, %(subject_id)s, %(parent_run_id)s::uuid,
        %(parent_step_id)s::uuid, %(forked_from_id)s::uuid, %(continued_from_id)s::uuid,
        CASE WHEN admitted THEN %(lease_holder)s END,
        CASE WHEN admitted
            THEN clock_timestamp() + make_interval(secs => %(lease_seconds)s::float8) END,
        %(rerun_requested)s::boolean, %(wake_at)s::timestamptz, %(random_seed)s::bigint,
        %(compensation)s, %(compensation_cause)s::jsonb, %(concurrency_key)s::text,
        %(priority)s::integer,
        -- GREATEST and (+) of NULLs: without a debounce, %(not_before)s as it is.
        GREATEST(%(not_before)s::timestamptz,
            clock_timestamp() + make_interval(secs => %(debounce_quiet_ms)s::float8 / 1000)),
        %(debounce_key)s::text,
        clock_timestamp() + make_interval(secs => %(debounce_max_wait_ms)s::float8 / 1000),
        %(retention_hold)s::boolean,
        %(steps_total)s::integer, %(steps_done)s::integer, %(current_step_key)s,
        CASE WHEN admitted THEN %(waiting_on)s
            WHEN refused AND %(status_when_full)s::text = %(run_cancelled)s::text THEN NULL
            ELSE %(waiting_admission)s END,
        %(last_error_code)s, %(schedule_id)s::bigint, %(scheduled_for)s::timestamptz,
        %(traceparent)s, %(created_at)s::timestamptz,
        %(updated_at)s::timestamptz,
        CASE WHEN refused AND %(status_when_full)s::text = %(run_cancelled)s::text
            THEN clock_timestamp() ELSE %(finished_at)s::timestamptz END
    FROM verdict
    -- The index `pikku_run_debounce_window`, named by its columns and condition (which must be
    -- written out, not passed, for PostgreSQL to match the index).
    ON CONFLICT (workflow, debounce_key) WHERE status = 'queued' AND debounce_key IS NOT NULL
    DO NOTHING
    RETURNING id, status
),
slot AS (
    INSERT INTO {slot} (rule, key, run_id, created_at)
    SELECT %(rule)s::text, %(concurrency_key)s::text, inserted.id, clock_timestamp()
    FROM inserted, verdict WHERE verdict.admitted AND %(rule)s::text IS NOT NULL
)
SELECT inserted.status, verdict.refused FROM inserted, verdict
