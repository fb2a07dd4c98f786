"""The engine: everything that reads or writes runs and steps. Adapters (tasks, dispatch, admin,
api, management commands) call it; it knows nothing of HTTP or the admin.

Three layers, each a folder that imports only the folders after it: `operations` (what adapters
call) → `replay` (one pass of a run and the `wf` handle its body drives) → `store` (the tables:
rows, leases, locks, status changes). Within the map below each module imports only modules
listed after it.

operations, what adapters call:

- `operations.updates`: `update`: a write that answers: validated in the caller, kept once per
  `update_id`, taken by `wf.receive`, answered by `wf.reply`, waited for by its NOTIFY.
- `operations.approvals`: deciding and reassigning approvals (`decide_approval`,
  `reassign_approval`): audited, judged under the approval's lock, refusals raised after their
  record commits.
- `operations.signals`: `send_signal`: an external event kept for, or handed to, the run's wait.
- `operations.approval_reads`: an approval as a dict; the approvals a user may decide or see.
- `operations.recovery`: the sweeps that heal crashes and lost messages, and the timer loop
  (which reports failures to the outage log, `pikku_workflows.outages`).
- `operations.backfills`: running backfills worked through a batch at a time, at most
  `max_active` runs of each going.
- `operations.schedules`: the schedule operations (create, update, delete, read, pause, resume,
  trigger, backfill) and the upsert of schedules declared in code.
- `operations.schedule_firing`: due schedules fired by the timer loop: claimed `skip_locked`,
  one tick row and at most one run per nominal time, the next tick written in the same commit.
- `operations.runs`: start a run (`start_workflow`) and wait for it (`run_to_completion`).
- `operations.control`: operator actions (cancel, suspend, resume, retry, fork), their audit,
  and the operations table (`OPERATION_RULES`: each one's function, permission and accepted
  statuses), from which the admin, the API and the `pikku` command offer them; a start
  its concurrency rule skipped or that replaces the oldest active run.
- `operations.rules`: what an operator action is (`Rule`, `Flag`), as every adapter offers it.
- `operations.holds`: `hold_run`: a hold keeps a run from every purge until it is released.
- `operations.reads`: what a run looks like from outside: status summary, `waiting_on`,
  timeline, state.
- `operations.run_changes`: which of many runs changed since a reader's mark, in one query
  (what live event streams wait on).
- `operations.limits`: named limits as operators see and edit them: rate, burst, live usage.
- `operations.users`: the users an operation acts for, checked.
- `operations.step_execution`: the step task's body: claim a queued step, run it, record it,
  continue the run.
- `operations.replay_check`: replaying stored histories against the current code, running no
  step (`manage.py pikku_replay_check`).
- `operations.purge`: retention: purging ended runs in short batches (`purge_runs`, and the
  timer loop's purge by RETENTION).
- `operations.timers`: due timers (sleeps, retry backoffs, deadlines, reminders) fired and
  dispatched.

replay, one pass of a run:

- `replay.orchestrator`: one pass: take the run lease, replay the body, record how the run
  ended.
- `replay.graphs`: a graph run's pass: plan from its steps, start what the plan fires, plan
  again (one planner per pass, told the rows each round moved).
- `replay.graph_steps`: the steps a graph pass reads, a long for_each's succeeded items as a
  count.
- `replay.versions`: deploy safety: the definition a graph run started on, and what a
  non-deterministic replay does (`ON_NON_DETERMINISM`).
- `replay.workflow`: the `wf` handle a body drives its run with.
- `replay.update_steps`: what `wf.receive` (a wait at an engine key, waited for in place by a
  worker's pass) and `wf.reply` (the answer recorded once) do during a replay.
- `replay.approval_steps`: what `wf.approval` does during a replay: open the approval, park,
  return its outcome.
- `replay.signal_steps`: what `wf.wait_for_signal` does during a replay: park, take a kept
  signal.
- `replay.patches`: `wf.patched` and `wf.deprecate_patch`: patch markers.
- `replay.compensation`: undoing a failed or cancelled run's succeeded steps (`compensate=`),
  latest first, each a durable `<key>:compensate` step; the pass drives them instead of the body.
- `replay.gather`: what `wf.call`, `wf.gather` and `wf.map` do during a replay: members run
  on cursors of their own, new queued steps dispatched together, the run parked once.
- `replay.steps`: what `wf.do`, `wf.sleep` and `wf.suspend` do during a replay (and a graph
  node).
- `replay.children`: child runs started by a step, and telling the parent when they end.
- `replay.queued`: handing a queued step to a worker from inside a pass, or running it in place
  (unless recovery holds in-place running while it takes work over).
- `replay.suspension`: suspending the run from inside its pass.
- `replay.atomic_steps`: an atomic step function's attempt: its writes and its result commit in
  one transaction, fenced by attempt.
- `replay.async_attempts`: attempts of async step functions on the pass's event loop, a
  gather's together, each under its timeout.
- `replay.attempts`: one attempt: `StepContext`, claiming it, its timeout, recording it
  (fenced).
- `replay.replay_pass`: one pass's view of a run: its steps read once, ordinals, state.
- `replay.event_loop`: the event loop a pass (or a step worker's attempt) owns: made on first
  use, closed when its owner ends.

store, the tables:

- `store.continue_transitions`: a run's hand-over to its successor (`wf.continue_as_new`): ended
  `continued`, successor created, kept signals moved, in one transaction; following a chain.
- `store.update_transitions`: updates kept as rows and sent as signals; answered once.
- `store.approval_rows`: an approval's life in the tables: opened, settled once, escalated,
  reminded; its Django signals, after commit.
- `store.approval_deciders`: who requested an approval (four eyes) and who may decide it.
- `store.signal_rows`: signals kept in order and handed to waits, each once; waits timed out.
- `store.run_state`: the run's state map, merged one key at a time (`run_state.sql`).
- `store.schedule_rows`: schedule rows, their ticks (one per nominal time) and audit trail;
  a batch of firings' ticks, runs and messages in one statement (`schedule_rows.sql`).
- `store.run_rows`: inserting run rows with their workflow version (`run_rows.sql`); a start
  under a debounce rule joins its key's open window or opens one.
- `store.debounce_transitions`: a start joining the queued run of its key's debounce window (the
  latest input wins, not_before moved on within max_wait, audited) in one statement
  (`debounce_transitions.sql`).
- `store.gather_transitions`: a gather's new queued steps dispatched in one statement
  (`gather_transitions.sql`), and each member's outcome judged against the others: the run is
  woken by the member that settles the gather last.
- `store.limit_slots`: named limits' `max_running`: a leased slot per executing step attempt,
  taken in its claim, freed when its code returns or its lease lapsed, handed to the oldest
  waiting attempt in the transaction that frees it.
- `store.leases`: run and step leases on the database clock, and the heartbeat that renews
  them.
- `store.approval_transitions`: an approval's status changes, settled once under its guard.
- `store.run_transitions`: a run's status changes, guarded by its status and lease holder.
- `store.rate_transitions`: rates of named limits and step functions: GCRA per (limit, key) in
  one statement on the database clock (`rate_transitions.sql`), saying when a start or a step
  attempt may begin; attempts held until then; keys closed by `pw.RateLimited`.
- `store.step_transitions`: every status change of a step, with its history row
  (`step_transitions.sql` on PostgreSQL).
- `store.purge_rows`: a purge's writes: every row naming a purged run through a foreign key
  (the plan read from the models' `_meta`) deleted or its key cleared, tombstones written
  (`purge_rows.sql`).
- `store.run_list_fields`: the run row's list fields (steps, current step, what it waits on,
  last error code), computed by the database in the write that ends a pass or moves the run.
- `store.schedule_transitions`: a schedule paused, resumed or advanced (a batch of them in
  one statement, `schedule_transitions.sql`); a backfill's status
  changes.
- `store.transitions`: what every status change shares: the source check, history stamps.
- `store.overlap_transitions`: a schedule's buffered runs (overlap `buffer_one`,
  `buffer_all`), admitted in tick order in the transaction that ends the run before them.
- `store.admission_transitions`: admission under a concurrency rule: slots taken and freed
  under their key's lock, and the queued runs admitted in the transaction that frees a slot
  (`admission_transitions.sql`); the timer loop admits queued runs whose rate's time came.
- `store.claims`: every row lock (`claims.sql`: the run guards the transitions compose in).
- `store.event_log`: the timeline's event log, read in seq order (its rows are written by
  database triggers; the seq is assigned at commit, under the run's event lock).
- `store.run_counts`: the fold of the run counts' changes (appended by triggers on the run
  table as runs are inserted, moved and deleted) into the counts, one statement a recovery
  pass (`run_counts.sql`).
- `store.notices`: PostgreSQL notices waited for (LISTEN): an update's answer by its caller, the
  next update by a pass waiting in place at `wf.receive`.
- `store.tables`: the quoted table and column names the statements use.

Rules that hold across it (tests/unit/test_engine__layout.py checks them): a run is failed only
by user code; leases, lapses and due times are judged on the database clock inside the guarded
write; user code runs outside any transaction; every result is fenced by the attempt that
claimed the step. The reasoning is in docs/architecture.md.
"""
