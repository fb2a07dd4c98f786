-- The row locks the engine's statements take, as fragments the transitions (transitions.sql)
-- compose in. Each holds the run row for as long as the statement's transaction lasts.

-- name: run_held_by_pass
-- The run %(run_id)s while it is running under this pass's lease %(lease_holder)s, held FOR
-- SHARE: a cancel or suspend (an UPDATE of the run) waits until the statement commits, and a
-- statement that waited on one re-reads the run and finds it no longer running.
SELECT id FROM {run}
WHERE id = %(run_id)s AND status = %(run_running)s AND lease_holder = %(lease_holder)s
FOR SHARE

-- name: run_running_held
-- The run %(run_id)s and its starter's username while it is running, held FOR SHARE OF run (a
-- worker's claim: it holds no run lease, only the run's status guards it).
SELECT run.id, starter.{username} AS started_by
FROM {run} run
LEFT JOIN {user} starter ON starter.{user_pk} = run.started_by_id
WHERE run.id = %(run_id)s AND run.status = %(run_running)s
FOR SHARE OF run
