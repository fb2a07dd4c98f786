-- The statements of a purge, one per table and foreign key the purge plan (purge_rows.py) reads
-- from the models' `_meta` (SQLite), or those as the sub-statements of one (`purge_runs`,
-- PostgreSQL): {table}, {pk} and {column} are quoted names from it, {among_ids} the vendor's
-- test of membership in the list %(ids)s. Each finds its rows by an index that leads with
-- {column} (the purge's tests check each).

-- name: delete_rows
-- The rows of {table} with the ids %(ids)s, gone.
DELETE FROM {table} WHERE {pk} {among_ids}

-- name: delete_naming
-- The rows of {table} whose {column} is one of %(ids)s, gone.
DELETE FROM {table} WHERE {column} {among_ids}

-- name: delete_naming_returning
-- The rows of {table} whose {column} is one of %(ids)s, gone; their ids (what the rows naming
-- them are found by).
DELETE FROM {table} WHERE {column} {among_ids} RETURNING {pk}

-- name: clear_naming
-- Rows of {table} that stay stop naming a purged row (one of %(ids)s) by {column}.
UPDATE {table} SET {column} = NULL WHERE {column} {among_ids}

-- name: purge_runs
-- PostgreSQL, one round trip: the runs %(run_ids)s gone with every row the plan takes with
-- them ({deletes}: one `delete_*_cte` per table and cascading key, each parent's returning the
-- ids its children are found by; the foreign keys are checked at commit, when none is left),
-- each a tombstone (purged_at on the database clock), keys naming them from rows that stay
-- cleared ({clears}); one row: how many rows each delete took ({counts}, in {deletes}' order).
-- Every sub-statement sees the same snapshot: the tombstones read the runs being deleted.
WITH tombstones AS (
    INSERT INTO {tombstone} (
        id, workflow, status, finished_at, idempotency_key, idempotency_scope, started_by_id,
        purged_at
    )
    SELECT id, workflow, status, finished_at, idempotency_key, idempotency_scope, started_by_id,
        clock_timestamp()
    FROM {run}
    WHERE id = ANY(%(run_ids)s)
),
{deletes},
{clears}
SELECT {counts}

-- name: delete_runs_cte
-- The runs %(run_ids)s, gone; their ids as `gone`.
{name} AS (DELETE FROM {table} WHERE {pk} = ANY(%(run_ids)s) RETURNING {pk} AS gone)

-- name: delete_naming_cte
-- The rows of {table} whose {column} is one of the ids {named} returns (rows the same
-- statement deletes), gone; their ids as `gone`. ARRAY(...) makes the planner probe {column}'s
-- index once per id, however many the batch holds.
{name} AS (DELETE FROM {table} WHERE {column} = ANY(ARRAY({named})) RETURNING {pk} AS gone)

-- name: clear_naming_cte
-- Rows of {table} (a table the purge does not delete from) stop naming a purged row (one of the
-- ids {named} returns) by {column}.
{name} AS (UPDATE {table} SET {column} = NULL WHERE {column} = ANY(ARRAY({named})))

-- name: clear_naming_of_kept_cte
-- Rows of {table} that stay ({pk} not among the ids {deleted} returns: a row both updated and
-- deleted by one statement keeps one of the two, unpredictably) stop naming a purged row (one of
-- the ids {named} returns) by {column}.
{name} AS (
    UPDATE {table} SET {column} = NULL
    WHERE {column} = ANY(ARRAY({named})) AND {pk} <> ALL(ARRAY({deleted}))
)

-- name: gone_from_cte
-- The ids the delete {name} (one of `purge_runs`' sub-statements) took.
SELECT gone FROM {name}

-- name: count_of_cte
-- How many rows the delete {name} (one of `purge_runs`' sub-statements) took.
(SELECT count(*) FROM {name})
