-- name: insert_run
-- Upsert the run's workflow version and insert the run, leased to %(lease_holder)s for
-- %(lease_seconds)s seconds on the database clock when those are given: one statement. (VALUES
-- take their types from the columns: a user model's key may be any type.)
WITH version AS (
    INSERT INTO {version} (name, graph_hash, code_version, definition, kind, status, created_at)
    VALUES (%(version_name)s, %(version_graph_hash)s, %(version_code_version)s,
        %(version_definition)s::jsonb, %(version_kind)s, %(version_status)s,
        %(version_created_at)s::timestamptz)
    ON CONFLICT DO NOTHING
)
INSERT INTO {run} (id, workflow, status, input, output, error, state, planned_steps, graph_hash,
    code_version, inline, idempotency_key, idempotency_scope, started_by_id, subject_type_id,
    subject_id, parent_run_id, parent_step_id, forked_from_id, continued_from_id, lease_holder,
    lease_expires_at, rerun_requested, wake_at, random_seed, compensation, compensation_cause,
    created_at, updated_at, finished_at)
VALUES (%(id)s::uuid, %(workflow)s, %(status)s, %(input)s::jsonb, %(output)s::jsonb,
    %(error)s::jsonb, %(state)s::jsonb, %(planned_steps)s::jsonb, %(graph_hash)s,
    %(code_version)s, %(inline)s::boolean, %(idempotency_key)s, %(idempotency_scope)s,
    %(started_by_id)s, %(subject_type_id)s, %(subject_id)s, %(parent_run_id)s::uuid,
    %(parent_step_id)s::uuid, %(forked_from_id)s::uuid, %(continued_from_id)s::uuid,
    %(lease_holder)s,
    clock_timestamp() + make_interval(secs => %(lease_seconds)s::float8),
    %(rerun_requested)s::boolean, %(wake_at)s::timestamptz, %(random_seed)s::bigint,
    %(compensation)s, %(compensation_cause)s::jsonb, %(created_at)s::timestamptz,
    %(updated_at)s::timestamptz, %(finished_at)s::timestamptz)
