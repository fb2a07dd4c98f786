-- The row locks the engine's statements take, as fragments the transitions (step_transitions.sql)
-- compose in, or claims.py runs itself. Each holds the run row for as long as the statement's
-- transaction lasts.
--
-- Lock order: a transaction that locks a step row and its run row takes the step first. The
-- run row is then shared (FOR SHARE, compatible with other shares: a worker's claim, a pass
-- recording one step while it creates the next) or taken only if nobody holds it right now
-- (SKIP LOCKED: the lease a worker takes with its step's outcome). The writers that take the
-- run first (a cancel, a retry, a suspend) lock no step row after it that a claim could hold;
-- and the one-statement claim, which shares the run before it updates the step, skips a run
-- row another transaction holds rather than wait (the general claim then waits, step first).
-- So no two of them can wait on each other.

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
-- The run %(run_id)s while it is running, held FOR SHARE (a worker's general claim, after it
-- locked the step: it holds no run lease, only the run's status guards it).
SELECT id FROM {run}
WHERE id = %(run_id)s AND status = %(run_running)s
FOR SHARE

-- name: run_running_unlocked
-- The run %(run_id)s, its workflow and its starter's username while it is running and no
-- other transaction holds its row, then held FOR SHARE OF run (the one-statement claim, before
-- it updates the step: it must not wait here; see the lock order above).
SELECT run.id, run.workflow, starter.{username} AS started_by
FROM {run} run
LEFT JOIN {user} starter ON starter.{user_pk} = run.started_by_id
WHERE run.id = %(run_id)s AND run.status = %(run_running)s
FOR SHARE OF run SKIP LOCKED
