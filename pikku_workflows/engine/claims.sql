-- The row locks the engine's statements take, as fragments the transitions (transitions.sql)
-- compose in, or claims.py runs itself. Each holds the run row for as long as the statement's
-- transaction lasts.
--
-- Lock order: a transaction that locks a step row and its run row either takes the run row
-- first and shares it (FOR SHARE: the guards of a pass's inserts and of a worker's claim,
-- compatible with each other), or takes the step row first and then the run row only if it
-- is not locked right now (SKIP LOCKED: the lease a worker takes with its step's outcome). So
-- no two of them can wait on each other.

-- name: run_held_by_pass
-- The run %(run_id)s while it is running under this pass's lease %(lease_holder)s, held FOR
-- SHARE: a cancel or suspend (an UPDATE of the run) waits until the statement commits, and a
-- statement that waited on one re-reads the run and finds it no longer running.
SELECT id FROM {run}
WHERE id = %(run_id)s AND status = %(run_running)s AND lease_holder = %(lease_holder)s
FOR SHARE

-- name: run_unlocked
-- The run (the row of the `moved` step, CTE of the statement) unless another transaction holds
-- it right now, then held FOR NO KEY UPDATE: the lease a recorded step's worker may take must
-- never wait (its step row is already locked; see the lock order above).
SELECT id FROM {run} WHERE id = (SELECT run_id FROM moved) FOR NO KEY UPDATE SKIP LOCKED

-- name: run_running_held
-- The run %(run_id)s and its starter's username while it is running, held FOR SHARE OF run (a
-- worker's claim: it holds no run lease, only the run's status guards it).
SELECT run.id, starter.{username} AS started_by
FROM {run} run
LEFT JOIN {user} starter ON starter.{user_pk} = run.started_by_id
WHERE run.id = %(run_id)s AND run.status = %(run_running)s
FOR SHARE OF run
