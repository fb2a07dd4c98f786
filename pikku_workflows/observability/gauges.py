"""The figures `GET metrics/` exports, read from the tables when scraped: every process that
reads them gives the same answer, and none keeps a count of its own. Labels are names from the
code (workflows, functions, queues, statuses, kinds), never a run id, a key or a tenant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Count, Min
from django.db.models.functions import Coalesce

from .. import dispatch
from ..models import (
    WorkflowApproval,
    WorkflowRun,
    WorkflowSchedule,
    WorkflowSlot,
    WorkflowStep,
    WorkflowWorker,
)
from ..models.run_counts import current_run_counts
from ..querysets import DatabaseNow, StatementNow, database_ago, waiting_on_q
from ..registry import registry
from ..status import RunStatus, StepStatus
from ..waiting import WaitingKind
from ..worker_registration import worker_silent_after

Samples = list[tuple[tuple[str, ...], float]]

# The waiting kinds a run's row records as they are (`waiting_on`); `lease` is a `step` wait
# whose lease lapsed, judged from the steps, and `admission` is the queued status.
RECORDED_KINDS = [
    kind for kind in WaitingKind.values if kind not in (WaitingKind.LEASE, WaitingKind.ADMISSION)
]


@dataclass(frozen=True)
class Gauge:
    """One exported gauge: its name, what it means (the `# HELP` line), its label names and
    its samples as (label values, value)."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: Samples


# Every gauge the app exports, with its meaning: docs/observability.md lists the same.
GAUGES: dict[str, str] = {
    "pikku_runs": "Runs by workflow and status.",
    "pikku_runs_waiting": "Live runs by workflow and what they wait on (a run waiting two ways counts under both).",
    "pikku_queue_runnable_steps": "Steps ready to run and not yet taken, by django-q2 cluster.",
    "pikku_queue_oldest_runnable_age_seconds": "Age of the oldest step ready to run and not yet taken, by django-q2 cluster (0 when none).",
    "pikku_approvals_pending": "Pending approvals of live runs, by workflow.",
    "pikku_approvals_oldest_pending_age_seconds": "Age of the oldest pending approval, by workflow.",
    "pikku_workers_seen": "pikku_worker processes whose heartbeat is current, by cluster.",
    "pikku_slots_in_use": "Concurrency slots held by admitted runs, by workflow.",
    "pikku_schedule_lag_seconds": "How long the most overdue unpaused schedule has been due, by workflow (0 when none is).",
}


def read_gauges() -> Iterator[Gauge]:
    """Every gauge of GAUGES, read now (a handful of grouped queries)."""
    yield _gauge("pikku_runs", ("workflow", "status"), _runs_by_status())
    yield _gauge("pikku_runs_waiting", ("workflow", "kind"), _runs_by_waiting_kind())
    ready, oldest = _runnable_by_queue()
    yield _gauge("pikku_queue_runnable_steps", ("queue",), ready)
    yield _gauge("pikku_queue_oldest_runnable_age_seconds", ("queue",), oldest)
    count, age = _pending_approvals()
    yield _gauge("pikku_approvals_pending", ("workflow",), count)
    yield _gauge("pikku_approvals_oldest_pending_age_seconds", ("workflow",), age)
    yield _gauge("pikku_workers_seen", ("cluster",), _workers_seen())
    yield _gauge("pikku_slots_in_use", ("workflow",), _slots_in_use())
    yield _gauge("pikku_schedule_lag_seconds", ("workflow",), _schedule_lag())


def _gauge(name: str, labels: tuple[str, ...], samples: Samples) -> Gauge:
    return Gauge(name, GAUGES[name], labels, samples)


def _runs_by_status() -> Samples:
    """From the stored counts (models/run_counts.py), both levels together."""
    counts: dict[tuple[str, str], int] = {}
    for (workflow, status, _), runs in current_run_counts().items():
        counts[(workflow, status)] = counts.get((workflow, status), 0) + runs
    return [(labels, float(runs)) for labels, runs in sorted(counts.items()) if runs]


def _runs_by_waiting_kind() -> Samples:
    """Every kind of `waiting_on_q` in three grouped reads of live runs (an ended run records no
    wait): the kinds the rows record; of the runs recorded as waiting on a step, those whose
    step's lease lapsed (`lease`, no longer `step`), read from the lapsed steps; and the queued
    runs (`admission`)."""
    counts: dict[tuple[str, str], float] = {}
    recorded = (
        WorkflowRun.objects.filter(waiting_on__in=RECORDED_KINDS)
        .order_by()
        .values_list("workflow", "waiting_on")
        .annotate(n=Count("*"))
    )
    for workflow, kind, n in recorded:
        counts[(workflow, kind)] = float(n)
    for workflow, n in _runs_with_a_lapsed_step():
        counts[(workflow, WaitingKind.LEASE)] = float(n)
        counts[(workflow, WaitingKind.STEP)] -= n
    queued = (
        WorkflowRun.objects.filter(waiting_on_q(WaitingKind.ADMISSION))
        .order_by()
        .values_list("workflow")
        .annotate(n=Count("*"))
    )
    for workflow, n in queued:
        counts[(workflow, WaitingKind.ADMISSION)] = float(n)
    return [(labels, n) for labels, n in counts.items() if n]


def _runs_with_a_lapsed_step() -> Any:
    """(workflow, runs) of the running runs waiting on a step whose lease lapsed: from the steps
    (a few, through their lease's index; the statement's clock lets the index serve)."""
    return (
        WorkflowStep.objects.filter(
            status=StepStatus.RUNNING,
            lease_expires_at__lt=StatementNow(),
            run__status=RunStatus.RUNNING,
            run__waiting_on=WaitingKind.STEP,
        )
        .order_by()
        .values_list("run__workflow")
        .annotate(n=Count("run_id", distinct=True))
    )


def runnable_steps() -> models.QuerySet[WorkflowStep]:
    """Steps of running runs that a worker could take now and none has: queued and not parked
    on a timer, or whose timer (a sleep, a retry backoff) is due."""
    waiting_for_a_worker = models.Q(
        status__in=[StepStatus.PENDING, StepStatus.SCHEDULED], wake_at__isnull=True
    )
    due = models.Q(wake_at__lte=DatabaseNow()) & (
        models.Q(status=StepStatus.SCHEDULED)
        | models.Q(status=StepStatus.FAILED, attempt__lt=models.F("attempt_limit"))
    )
    return WorkflowStep.objects.filter(waiting_for_a_worker | due, run__status=RunStatus.RUNNING)


def _age(since: Any) -> Any:
    return models.ExpressionWrapper(DatabaseNow() - since, output_field=models.DurationField())


def _runnable_by_queue() -> tuple[Samples, Samples]:
    rows = (
        runnable_steps()
        .order_by()
        .values_list("function_name")
        .annotate(n=Count("*"), age=_age(Min(Coalesce("wake_at", "updated_at"))))
    )
    ready: dict[str, float] = {}
    oldest: dict[str, float] = {}
    for function, n, age in rows:
        queue = queue_of(function)
        ready[queue] = ready.get(queue, 0.0) + n
        oldest[queue] = max(oldest.get(queue, 0.0), max(age.total_seconds(), 0.0))
    for queue in known_queues():
        ready.setdefault(queue, 0.0)
        oldest.setdefault(queue, 0.0)
    return (
        [((queue,), n) for queue, n in sorted(ready.items())],
        [((queue,), age) for queue, age in sorted(oldest.items())],
    )


def queue_of(function_name: str | None) -> str:
    """The django-q2 cluster that runs `function_name`'s queued attempts (the orchestrators'
    for steps a pass runs: callables, timers, children, and functions this code lacks)."""
    definition = registry.step_functions.get(function_name or "")
    if definition is not None and not definition.inline:
        return dispatch.step_cluster(definition.queue)
    return dispatch.orchestrator_cluster()


def known_queues() -> set[str]:
    """Every cluster the registered code sends work to, so an idle queue reads 0, not absent."""
    queues = {dispatch.orchestrator_cluster()}
    for definition in registry.step_functions.values():
        if not definition.inline:
            queues.add(dispatch.step_cluster(definition.queue))
    return queues


def _pending_approvals() -> tuple[Samples, Samples]:
    rows = (
        WorkflowApproval.objects.pending()
        .order_by()
        .values_list("run__workflow")
        .annotate(n=Count("*"), age=_age(Min("created_at")))
    )
    counts: Samples = [((workflow,), float(n)) for workflow, n, _ in rows]
    ages: Samples = [((workflow,), max(age.total_seconds(), 0.0)) for workflow, _, age in rows]
    return counts, ages


def _workers_seen() -> Samples:
    rows = (
        WorkflowWorker.objects.filter(last_seen_at__gte=database_ago(worker_silent_after()))
        .order_by()
        .values_list("cluster")
        .annotate(n=Count("*"))
    )
    return [((cluster,), float(n)) for cluster, n in rows]


def _slots_in_use() -> Samples:
    """Per workflow, not per key: a key can name a customer or a tenant."""
    run_slots = WorkflowSlot.objects.filter(step__isnull=True)  # limits' slots are steps'
    rows = run_slots.order_by().values_list("run__workflow").annotate(n=Count("*"))
    return [((workflow,), float(n)) for workflow, n in rows]


def _schedule_lag() -> Samples:
    rows = (
        WorkflowSchedule.objects.filter(paused=False, next_fire_at__isnull=False)
        .order_by()
        .values_list("workflow")
        .annotate(due_since=Min("next_fire_at"), now=DatabaseNow())
    )
    return [
        ((workflow,), max(0.0, (now - due_since).total_seconds()))
        for workflow, due_since, now in rows
    ]
