-- The run's state map, written one key at a time.

-- name: merge_run_state
-- Set key %(key)s of run %(run_id)s's state to %(value)s and keep every other key, in one
-- statement: writers of different keys (parallel graph nodes, a pass) never lose each other's.
-- Fenced like the writer's other writes: by the lease %(lease_holder)s of a pass, or by the
-- running attempt %(attempt)s of step %(step_id)s (a superseded attempt writes nothing); a NULL
-- fence is not checked. Returns the run's id, or no row (nothing written).
UPDATE {run} SET
    state = COALESCE(state, jsonb_build_object()) || jsonb_build_object(%(key)s::text, %(value)s::jsonb),
    updated_at = clock_timestamp()
WHERE id = %(run_id)s::uuid
    AND (%(lease_holder)s::text IS NULL OR lease_holder = %(lease_holder)s::text)
    AND (%(step_id)s::uuid IS NULL OR EXISTS (
        SELECT 1 FROM {step}
        WHERE id = %(step_id)s::uuid AND attempt = %(attempt)s::integer AND status = %(running)s
    ))
RETURNING id
