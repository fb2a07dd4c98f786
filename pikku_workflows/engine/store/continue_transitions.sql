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
