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

-- name: purger_lock
-- True when this transaction now holds the purger's lock (%(purger_key)s, released at its end),
-- False when another purge's batch holds it: one purger at a time, never waited for.
SELECT pg_try_advisory_xact_lock(%(purger_key)s)
-- name: lock_admission_key
-- The slot count of key %(key)s under rule %(rule)s (created at zero if missing), its row
-- locked until the transaction ends, and its `held`. Whatever frees or hands out the key's
-- slots holds it first, so each statement after it sees every slot the others committed. Taken
-- before any run row: the lock order is key, then runs.
INSERT INTO {slot_count} AS counted (rule, key, held) VALUES (%(rule)s::text, %(key)s::text, 0)
ON CONFLICT (rule, key) DO UPDATE SET held = counted.held
RETURNING held

-- name: take_slot
-- A slot of key %(concurrency_key)s under rule %(rule)s (none when the rule is NULL, or when
-- %(not_before)s has not come: a rate holds the run) if fewer than %(max_active)s are held: the key's count row is locked whether or not one is free (ON
-- CONFLICT DO UPDATE locks the row it meets), and its condition is judged on the row's latest
-- version once a concurrent start that holds it commits, so two starts never both take the
-- last slot. One row when a slot was taken.
INSERT INTO {slot_count} AS counted (rule, key, held)
SELECT %(rule)s::text, %(concurrency_key)s::text, 1
WHERE %(rule)s::text IS NOT NULL
    AND (%(not_before)s::timestamptz IS NULL OR %(not_before)s::timestamptz <= statement_timestamp())
ON CONFLICT (rule, key) DO UPDATE SET held = counted.held + 1
WHERE counted.held < %(max_active)s::integer
RETURNING 1

-- name: queued_runs_of_key
-- Up to `room` (CTE of the statement) queued runs of %(workflow)s with key %(key)s whose
-- not_before came by the database clock, earliest effective start (created_at - priority)
-- first, held FOR NO KEY UPDATE; a run another transaction holds right now (a cancel or suspend
-- of it) is skipped rather than waited for: that transaction moves it, and the next slot freed
-- (or recovery's sweep) admits whoever is queued then.
SELECT id FROM {run}
WHERE workflow = %(workflow)s::text AND concurrency_key = %(key)s::text AND status = %(run_queued)s
    AND (not_before IS NULL OR not_before <= clock_timestamp())
ORDER BY created_at - make_interval(secs => priority), id
LIMIT (SELECT room FROM room)
FOR NO KEY UPDATE SKIP LOCKED

-- name: due_queued_runs
-- Up to %(limit)s queued runs without a concurrency key whose not_before came by the database
-- clock, earliest first, held FOR NO KEY UPDATE, skipping runs another transaction holds (another
-- timer loop, an operator's cancel).
SELECT id FROM {run}
WHERE status = %(run_queued)s AND not_before <= clock_timestamp() AND concurrency_key IS NULL
ORDER BY not_before
LIMIT %(limit)s
FOR NO KEY UPDATE SKIP LOCKED

-- name: lock_steps_of_purged_runs
-- The steps of the runs %(run_ids)s locked FOR UPDATE where no other transaction holds them
-- (never waited for); returns the runs some of whose steps another transaction holds (a claim,
-- a retry re-arming them), which the purge keeps. One statement: the steps never leave the
-- database.
WITH taken AS (
    SELECT id FROM {step} WHERE run_id = ANY(%(run_ids)s) FOR UPDATE SKIP LOCKED
)
SELECT step.run_id
FROM {step} step
LEFT JOIN taken ON taken.id = step.id
WHERE step.run_id = ANY(%(run_ids)s)
GROUP BY step.run_id
HAVING count(*) <> count(taken.id)
