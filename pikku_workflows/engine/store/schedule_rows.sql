-- name: insert_tick
-- The tick of a schedule at a nominal time, unless that nominal time has one already (then no
-- row comes back): the unique key, not a prior read, decides, so two firings cannot both win.
INSERT INTO {tick} (schedule_id, nominal_at, fired_at, outcome, run_id, backfill_id, reason)
VALUES (%(schedule_id)s, %(nominal_at)s, %(fired_at)s, %(outcome)s, %(run_id)s::uuid,
    %(backfill_id)s, %(reason)s)
ON CONFLICT (schedule_id, nominal_at) DO NOTHING
RETURNING id
