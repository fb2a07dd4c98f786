-- name: limit_rate
-- Fragment: the rate of limit %(limit_name)s as a one-row CTE `rate` (count, period_ms, burst):
-- its WorkflowLimit row's when an operator edited it (managed_by %(edited)s) and the row has one
-- (an edit of max_running alone on a limit with no rate left it empty), else the code's.
edited AS (
    SELECT split_part(rate, '/', 1)::float8 AS count,
        CASE split_part(rate, '/', 2)
            WHEN 's' THEN 1000 WHEN 'm' THEN 60000 WHEN 'h' THEN 3600000 ELSE 86400000
        END::float8 AS period_ms,
        burst::float8 AS burst
    FROM {limit} WHERE name = %(limit_name)s::text AND managed_by = %(edited)s::text
        AND rate <> ''
),
rate AS (
    SELECT * FROM edited
    UNION ALL
    SELECT %(count)s::float8, %(period_ms)s::float8, %(burst)s::float8
    WHERE NOT EXISTS (SELECT 1 FROM edited)
)

-- name: take_rate
-- GCRA for one start under limit %(limit_name)s, key %(key)s, on the database clock: the rate
-- is the limit's WorkflowLimit row's when an operator edited it (managed_by %(edited)s), else the code's
-- (%(count)s per %(period_ms)s ms, burst %(burst)s). The key's theoretical arrival time moves
-- on by one emission interval from itself or now, whichever is later (its row locked, judged
-- on its latest version: concurrent starts take turns); returns when this start may begin
-- (that time less the emission and the burst's tolerance, or now if that has passed) and
-- how many seconds ahead of now that time is (`seconds_ahead` ≤ 0: at once).
WITH {limit_rate},
spacing AS (
    SELECT make_interval(secs => period_ms / count / 1000) AS emission,
        make_interval(secs => burst * period_ms / count / 1000) AS tolerance
    FROM rate
),
moved AS (
    INSERT INTO {rate} AS taken (limit_name, key, tat)
    SELECT %(limit_name)s::text, %(key)s::text, clock_timestamp() + emission FROM spacing
    ON CONFLICT (limit_name, key) DO UPDATE
    SET tat = GREATEST(taken.tat, clock_timestamp()) + (SELECT emission FROM spacing)
    RETURNING taken.tat
)
SELECT GREATEST(moved.tat - spacing.emission - spacing.tolerance, clock_timestamp()),
    extract(epoch FROM moved.tat - spacing.emission - spacing.tolerance - clock_timestamp())
        AS seconds_ahead
FROM moved, spacing

-- name: close_rate
-- Close limit %(limit_name)s, key %(key)s until %(seconds)s seconds from now (database clock):
-- an upstream refused (`pw.RateLimited`). The key's theoretical arrival time moves to that
-- time plus the burst's tolerance (never back), so the next start it gives is that time, the
-- ones after it spaced at the rate (the burst is spent). The rate as in take_rate.
WITH {limit_rate}
INSERT INTO {rate} AS taken (limit_name, key, tat)
SELECT %(limit_name)s::text, %(key)s::text,
    clock_timestamp() + make_interval(secs => %(seconds)s::float8 + burst * period_ms / count / 1000)
FROM rate
ON CONFLICT (limit_name, key) DO UPDATE SET tat = GREATEST(taken.tat, EXCLUDED.tat)
