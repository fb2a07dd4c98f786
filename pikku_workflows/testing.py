"""Testing your workflows: `drain` does in the test's own process what `pikku_worker` would do,
so a test starts a run, drains it, and checks how it ended; no worker, no waiting.

```python
from pikku_workflows.testing import drain

run_id = pw.start_workflow("order_fulfilment", {"id": 7, "amount": 12})
assert drain(run_id, advance="10m")["status"] == "completed"
```

It works inside Django's `TestCase` (whose transaction never commits, so no queue message is
ever sent: `drain` reads what to do from the tables, as recovery does) and in pytest with
`django_db` or `transactional_db`, on SQLite and PostgreSQL. `approve`, `reject` and `signal`
do what a person or another system would, then drain. The pytest plugin exposes all four as
the `workflows` fixture (`workflows.drain(...)`, `workflows.approve(...)`).

`assert_deterministic` and `strict_determinism` make the determinism warning of `manage.py
check` (W009: a body reads the clock, draws random numbers, makes uuids or reads the
environment itself) an error inside tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from .durations import parse_duration

DEFAULT_TASK_LIMIT = 1000


class DrainLimitExceeded(RuntimeError):
    """`drain` ran more passes and steps than its limit: something keeps itself busy."""


def drain(
    run_id: Any = None,
    *,
    advance: int | str | timedelta | None = None,
    limit: int = DEFAULT_TASK_LIMIT,
) -> dict[str, Any] | None:
    """Run orchestrator passes, queued steps and due timers until nothing is runnable: every run
    (or `run_id` and the child runs it started) has ended or waits on something in the future
    (a timer, an operator, a step another process holds).

    `advance` (ms, "10m", a timedelta) lets that much time pass for the engine's timers (time
    skipping, as Temporal's test environment does): whenever the runs are idle, their clock jumps
    to the next armed timer (sleep, retry backoff) while the time lasts: every armed timer of
    these runs is moved earlier by the jump, in one UPDATE, and fires as the timer loop would
    fire it. What is left of `advance` past the last timer moves the timers still armed, so a
    later `drain(advance=...)` goes on from there.

    Returns the run's status summary (`pw.get_run_status`) when `run_id` is given, else None.
    Raises DrainLimitExceeded after `limit` passes and steps (a workflow that never parks), and
    whatever a pass raises (an engine error the worker would log).
    """
    from .engine.operations.reads import get_run_status, run_pk

    root = None if run_id is None else run_pk(run_id)
    skip = timedelta(milliseconds=parse_duration(advance, what="advance")) if advance else None
    _Drainer(root, limit).run(skip)
    return None if root is None else get_run_status(root)


def assert_deterministic(*names: str) -> None:
    """Fail (AssertionError) when a workflow body (of `names`; default: every registered one)
    reads the clock, draws random numbers, makes uuids or reads the environment itself, listing
    each place with what to use instead: the warning `manage.py check` gives (W009), as an
    error. Put it in a test of your own: `def test_workflows_replay_safely():
    assert_deterministic()`."""
    from .registry import registry

    chosen = names or tuple(sorted(registry.workflows))
    problems = [
        finding.describe(name)
        for name in chosen
        for finding in registry.get_workflow(name).nondeterminism
    ]
    if problems:
        raise AssertionError(
            "\n".join(["Workflow bodies a replay would see differently:", *problems])
        )


@contextlib.contextmanager
def strict_determinism() -> Iterator[None]:
    """While inside, registering a workflow whose body reads the clock, draws random numbers,
    makes uuids or reads the environment itself raises `InvalidInput` listing each place (a
    test that defines workflows, or imports the module that does)."""
    from .registry import registry

    before, registry.refuse_nondeterminism = registry.refuse_nondeterminism, True
    try:
        yield
    finally:
        registry.refuse_nondeterminism = before


def approve(
    run_id: Any, step_key: str, *, by: Any, comment: str = "", data: Any = None
) -> dict[str, Any]:
    """Drain the run until it waits on the approval step `step_key`, approve it as the user
    `by` (under the approval's own approvers, policy and permission: a test that approves as
    someone who may not gets `pw.ApprovalForbidden`), and drain again; returns the run's status
    summary."""
    return _decide(run_id, step_key, True, by, comment, data)


def reject(
    run_id: Any, step_key: str, *, by: Any, comment: str = "", data: Any = None
) -> dict[str, Any]:
    """`approve`, rejecting."""
    return _decide(run_id, step_key, False, by, comment, data)


def signal(run_id: Any, name: str, payload: Any = None, *, by: Any = None) -> dict[str, Any]:
    """Send the signal `name` to the run (`pw.send_signal`) and drain it; returns the run's
    status summary."""
    from .engine.operations.signals import send_signal

    send_signal(run_id, name, payload, by=by)
    return drain(run_id) or {}


def _decide(
    run_id: Any, step_key: str, approve: bool, by: Any, comment: str, data: Any
) -> dict[str, Any]:
    from .engine.operations.approvals import decide_approval

    drain(run_id)
    decide_approval(
        _pending_approval_id(run_id, step_key), approve=approve, by=by, comment=comment, data=data
    )
    return drain(run_id) or {}


def _pending_approval_id(run_id: Any, step_key: str) -> Any:
    from .engine.operations.reads import run_pk
    from .models import WorkflowApproval
    from .status import ApprovalStatus

    pending = WorkflowApproval.objects.filter(
        run_id=run_pk(run_id), step__step_key=step_key, status=ApprovalStatus.PENDING
    ).values_list("pk", flat=True)
    found = pending.first()
    if found is None:
        raise ApprovalNotPending(
            f"Run {run_id} has no pending approval at step {step_key!r} (after draining it): "
            "check the key, and that the run got that far."
        )
    return found


class ApprovalNotPending(AssertionError):
    """`approve`/`reject` found no pending approval at that step: the test's premise is wrong."""


class _Drainer:
    """One drain: rounds of timers, queued steps and passes until a round changes nothing."""

    def __init__(self, root: Any, limit: int) -> None:
        self.root = root
        self.budget = limit
        # What each run looked like after our last pass of it: a pass over the same rows would
        # replay to the same place (the body is deterministic), so it is not run again.
        self.passed: dict[Any, tuple[Any, ...]] = {}

    def run(self, skip: timedelta | None) -> None:
        from .engine.operations.timers import shift_timers

        self.until_idle()
        left = skip or timedelta(0)
        while left > timedelta(0):
            due_in = self.next_timer_in()
            jump = left if due_in is None else min(due_in, left)
            shift_timers(self.scope(), jump)
            left -= jump
            self.until_idle()

    def next_timer_in(self) -> timedelta | None:
        """How far ahead the next armed timer of a running run is, by the database clock."""
        from .models import WorkflowStep
        from .querysets import DatabaseNow
        from .status import RunStatus

        armed = WorkflowStep.objects.filter(
            run__status=RunStatus.RUNNING, wake_at__gt=DatabaseNow()
        ).with_clock()
        scope = self.scope()
        if scope is not None:
            armed = armed.filter(run_id__in=scope)
        return armed.order_by("wake_at").values_list("wake_in", flat=True).first()

    def until_idle(self) -> None:
        from .engine.operations.timers import fire_due_timers

        while True:
            before = self.snapshot()
            fire_due_timers()
            self.run_queued_steps()
            self.run_passes()
            if self.snapshot() == before:
                return

    def scope(self) -> list[Any] | None:
        """The root run and its descendants (None: every run)."""
        from .models import WorkflowRun

        if self.root is None:
            return None
        scope, frontier = [self.root], [self.root]
        while frontier:
            frontier = list(
                WorkflowRun.objects.filter(parent_run_id__in=frontier).values_list("pk", flat=True)
            )
            scope += frontier
        return scope

    def snapshot(self, run_ids: list[Any] | None = None) -> dict[Any, tuple[Any, ...]]:
        """Per run: its status and each step's (key, status, attempt, armed): what a pass reads."""
        from .models import WorkflowRun, WorkflowStep

        scope = self.scope() if run_ids is None else run_ids
        runs = (
            WorkflowRun.objects.all() if scope is None else WorkflowRun.objects.filter(pk__in=scope)
        )
        steps = (
            WorkflowStep.objects.all()
            if scope is None
            else WorkflowStep.objects.filter(run_id__in=scope)
        )
        seen: dict[Any, list[Any]] = {
            pk: [status] for pk, status in runs.values_list("pk", "status")
        }
        rows = steps.order_by("run_id", "step_key").values_list(
            "run_id", "step_key", "status", "attempt", "wake_at"
        )
        for run, key, status, attempt, wake_at in rows:
            seen.setdefault(run, [None]).append((key, status, attempt, wake_at is not None))
        return {pk: tuple(parts) for pk, parts in seen.items()}

    def spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise DrainLimitExceeded(
                "drain ran its limit of passes and steps and the runs still move: a workflow "
                "that never parks? Pass a higher `limit=` if that much work is expected."
            )

    def run_queued_steps(self) -> None:
        """What a step worker takes: queued steps of running runs nobody has claimed, and due
        retries of queued steps (the message of either may never have been sent: a TestCase
        never commits)."""
        from .engine.operations.step_execution import execute_queued_step
        from .models import WorkflowStep
        from .registry import registry
        from .status import RunStatus, StepStatus

        queued = [name for name, d in registry.step_functions.items() if not d.inline]
        steps = WorkflowStep.objects.filter(
            run__status=RunStatus.RUNNING, function_name__in=queued, wake_at__isnull=True
        ).filter(status__in=[StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.FAILED])
        scope = self.scope()
        if scope is not None:
            steps = steps.filter(run_id__in=scope)
        for step in steps.order_by("created_at").only(
            "run_id", "step_key", "status", "attempt", "attempt_limit"
        ):
            if step.status == StepStatus.FAILED and step.attempt >= step.attempt_limit:
                continue  # spent: the run's pass decides what its failure means
            self.spend()
            execute_queued_step(step.run_id, step.step_key)

    def run_passes(self) -> None:
        """An orchestrator pass of every running run that changed since our last pass of it."""
        from .engine.replay.orchestrator import orchestrate
        from .status import RunStatus

        for pk, state in self.snapshot().items():
            if state[0] != RunStatus.RUNNING or self.passed.get(pk) == state:
                continue
            self.spend()
            orchestrate(pk)
            self.passed[pk] = self.snapshot([pk]).get(pk, ())
