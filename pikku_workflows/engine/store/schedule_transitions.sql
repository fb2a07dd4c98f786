-- name: advance_schedules
-- Move each schedule of %(advances)s (a JSON array of {id, next_nominal_at, next_fire_at,
-- last_fired_at, last_outcome, skipped_in_a_row}) to its next tick, noting what its firing did:
-- `advance_schedule` for a batch of firings, in one statement.
UPDATE {schedule} AS schedule
SET next_nominal_at = advance.next_nominal_at, next_fire_at = advance.next_fire_at,
    last_fired_at = advance.last_fired_at, last_outcome = advance.last_outcome,
    skipped_in_a_row = advance.skipped_in_a_row, updated_at = clock_timestamp()
FROM jsonb_to_recordset(%(advances)s::jsonb) AS advance(id bigint,
    next_nominal_at timestamptz, next_fire_at timestamptz, last_fired_at timestamptz,
    last_outcome text, skipped_in_a_row integer)
WHERE schedule.id = advance.id
