"""The engine: everything that reads or writes runs and steps. Adapters (tasks, dispatch, admin,
api, management commands) call it; it knows nothing of HTTP or the admin.

Map (each module imports only those listed below it; none imports one above):

- `approvals`: deciding and reassigning approvals (`decide_approval`, `reassign_approval`):
  audited, judged under the approval's lock, refusals raised after their record commits.
- `signals`: `send_signal`: an external event kept for, or handed to, the run's wait.
- `approval_reads`: an approval as a dict; the approvals a user may decide or see.
- `control`: operator actions (cancel, suspend, resume, retry, fork), their audit, and the
  rules of which statuses each accepts (`OPERATION_RULES`, which the admin and API offer).
- `runs`: start a run (`start_workflow`) and wait for it (`run_to_completion`).
- `reads`: what a run looks like from outside: status summary, `waiting_on`, timeline, state.
- `worker`: the step task's body: claim a queued step, run it, record it, continue the run.
- `recovery`: the sweeps that heal crashes and lost messages, and the timer loop.
- `replay_check`: replaying stored histories against the current code, running no step
  (`manage.py pikku_replay_check`).
- `orchestrator`: one pass: take the run lease, replay the body, record how the run ended.
- `graphs`: a graph run's pass: plan from its steps, start what the plan fires, plan again.
- `versions`: deploy safety: the definition a graph run started on, and what a
  non-deterministic replay does (`ON_NON_DETERMINISM`).
- `workflow`: the `wf` handle a body drives its run with.
- `approval_steps`: what `wf.approval` does during a replay: open the approval, park, return
  its outcome.
- `signal_steps`: what `wf.wait_for_signal` does during a replay: park, take a kept signal.
- `patches`: `wf.patched` and `wf.deprecate_patch`: patch markers.
- `steps`: what `wf.do`, `wf.sleep` and `wf.suspend` do during a replay (and a graph node).
- `children`: child runs started by a step, and telling the parent when they end.
- `queued`: handing a queued step to a worker from inside a pass.
- `suspension`: suspending the run from inside its pass.
- `attempts`: one attempt: `StepContext`, claiming it, its timeout, recording it (fenced).
- `timers`: due timers (sleeps, retry backoffs, deadlines, reminders) fired and dispatched.
- `approval_rows`: an approval's life in the tables: opened, settled once, escalated,
  reminded; who requested it and who may decide it; its Django signals, after commit.
- `signal_rows`: signals kept in order and handed to waits, each once; waits timed out.
- `replay`: one pass's view of a run: its steps read once, ordinals, state.
- `run_state`: the run's state map, merged one key at a time (`run_state.sql`).
- `run_rows`: inserting run rows with their workflow version (`run_rows.sql`).
- `leases`: run and step leases on the database clock, and the heartbeat that renews them.
- `transitions`: every status change of runs, steps and approvals (`transitions.sql` on
  PostgreSQL).
- `claims`: every row lock (`claims.sql`: the run guards the transitions compose in).
- `tables`: the quoted table and column names the statements use.

Rules that hold across it (tests/unit/test_engine__layout.py checks them): a run is failed only
by user code; leases, lapses and due times are judged on the database clock inside the guarded
write; user code runs outside any transaction; every result is fenced by the attempt that
claimed the step. The reasoning is in docs/architecture.md.
"""
