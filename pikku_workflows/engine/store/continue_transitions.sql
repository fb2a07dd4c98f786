-- A chain of runs that continued as new (docs/long-lived-runs.md), read in one statement however
-- long it is: `continued_from` is unique, so each run has at most one successor.

-- name: chain_from
-- Run %(run_id)s and every run that continues it, in chain order (its id, one row per run).
WITH RECURSIVE chain (id, link) AS (
    SELECT id, 0 FROM {run} WHERE id = %(run_id)s::uuid
    UNION ALL
    SELECT successor.id, chain.link + 1
    FROM {run} AS successor JOIN chain ON successor.continued_from_id = chain.id
)
SELECT id FROM chain ORDER BY link

-- name: chain_and_latest_run
-- The chain from run %(run_id)s (its runs' ids, in chain order) and the workflow, input and
-- state of its latest run, in one row; no row for an unknown run.
WITH RECURSIVE chain (id, link) AS (
    SELECT id, 0 FROM {run} WHERE id = %(run_id)s::uuid
    UNION ALL
    SELECT successor.id, chain.link + 1
    FROM {run} AS successor JOIN chain ON successor.continued_from_id = chain.id
)
SELECT (SELECT array_agg(id ORDER BY link) FROM chain), latest.workflow, latest.input, latest.state
FROM {run} AS latest
WHERE latest.id = (SELECT id FROM chain ORDER BY link DESC LIMIT 1)
