-- name: insert_tick
-- The tick of a schedule at a nominal time, unless that nominal time has one already (then no
-- row comes back): the unique key, not a prior read, decides, so two firings cannot both win.
INSERT INTO {tick} (schedule_id, nominal_at, fired_at, outcome, run_id, backfill_id, reason)
VALUES (%(schedule_id)s, %(nominal_at)s, %(fired_at)s, %(outcome)s, %(run_id)s::uuid,
    %(backfill_id)s, %(reason)s)
ON CONFLICT (schedule_id, nominal_at) DO NOTHING
RETURNING id

-- name: insert_fired_ticks
-- A batch of firings in one statement: the ticks of %(ticks)s (a JSON array of {schedule_id,
-- nominal_at, fired_at, outcome, run_id, reason}), each unless its nominal time has one
-- already (the unique key decides, as in insert_tick); the runs of %(runs)s (JSON rows of the
-- run table, run_rows.run_rows_json) whose tick was written, with their versions %(versions)s
-- upserted, and the orchestrator message of each run written (dispatch.sql
-- `queue_run_messages`). Returns the id of each run started.
WITH version AS (
    INSERT INTO {version} (name, graph_hash, code_version, definition, kind, status, created_at)
    SELECT name, graph_hash, code_version, definition, kind, status, created_at
    FROM jsonb_populate_recordset(NULL::{version}, %(versions)s::jsonb)
    ON CONFLICT DO NOTHING
),
tick AS (
    INSERT INTO {tick} (schedule_id, nominal_at, fired_at, outcome, run_id, backfill_id, reason)
    SELECT fired.schedule_id, fired.nominal_at, fired.fired_at, fired.outcome, fired.run_id,
        NULL, fired.reason
    FROM jsonb_to_recordset(%(ticks)s::jsonb) AS fired(schedule_id bigint,
        nominal_at timestamptz, fired_at timestamptz, outcome text, run_id uuid, reason text)
    ON CONFLICT (schedule_id, nominal_at) DO NOTHING
    RETURNING schedule_id, nominal_at, run_id
),
started AS (
    INSERT INTO {run}
    SELECT run.* FROM jsonb_populate_recordset(NULL::{run}, %(runs)s::jsonb) AS run
    JOIN tick ON tick.run_id = run.id
    RETURNING id
),
{queue_run_messages}
SELECT started.id FROM started
WHERE (SELECT count(*) FROM run_queues_woken) >= 0
