-- The fold of the run counts' changes (the rows the run table's triggers append) into the
-- counts. {run_count} and {run_count_change} are the models' tables.

-- name: fold_run_count_changes
-- Every change visible now, gone from {run_count_change} and added to its count in
-- {run_count} (created at its first change), in key order so two folds never deadlock; a
-- change a writer has not committed yet stays for the next fold.
WITH folded AS (
    DELETE FROM {run_count_change} RETURNING workflow, status, top_level, runs
)
INSERT INTO {run_count} (workflow, status, top_level, runs)
SELECT workflow, status, top_level, SUM(runs) FROM folded
GROUP BY workflow, status, top_level
ORDER BY workflow, status, top_level
ON CONFLICT (workflow, status, top_level) DO UPDATE SET runs = {run_count}.runs + EXCLUDED.runs

-- name: add_run_count_changes
-- (SQLite, whose writers take turns: the transaction then deletes the changes it added.)
-- Every change in {run_count_change} added to its count in {run_count}.
INSERT INTO {run_count} (workflow, status, top_level, runs)
SELECT workflow, status, top_level, SUM(runs) FROM {run_count_change} WHERE true
GROUP BY workflow, status, top_level
ON CONFLICT (workflow, status, top_level) DO UPDATE SET runs = {run_count}.runs + excluded.runs

-- name: delete_run_count_changes
-- (SQLite) Every change in {run_count_change}, gone (added to the counts just before).
DELETE FROM {run_count_change}
