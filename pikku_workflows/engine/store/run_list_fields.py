"""The run row's list fields: `steps_total`, `steps_done`, `current_step_key`, `waiting_on`
(the kind of wait of its newest step in flight) and `last_error_code`, what a list shows of a
run, so a page reads one row per run. The database computes them from the run's steps inside
the write that ends a pass or moves the run (`list_field_values`; the one-statement dispatches
that park a run set them in their own lease release, `parked_list_params`); they hold as of
that write.
"""

from __future__ import annotations

from typing import Any

from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce

from ...models import WorkflowRun, WorkflowStep
from ...status import TERMINAL_RUN_STATUSES, RunStatus, StepKind, StepStatus
from ...step_keys import ENGINE_KEY_MARK
from ...waiting import WaitingKind


def _steps() -> QuerySet[WorkflowStep]:
    return WorkflowStep.objects.filter(run_id=OuterRef("pk")).order_by()


def _count(steps: QuerySet[WorkflowStep]) -> Subquery:
    """How many of `steps` there are, the engine's own (handlers, suspends, patch markers,
    compensations) left out: they are not the run's progress."""
    own = steps.exclude(step_key__contains=ENGINE_KEY_MARK)
    counted = own.values("run_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0)  # type: ignore[return-value]


def _in_flight(succeeded: Any = None) -> QuerySet[WorkflowStep]:
    """The run's steps in flight, newest first (the order `reads.waiting_on` reads them in);
    `succeeded`: a step the same statement records as succeeded, still running in its
    snapshot."""
    retry_due_later = Q(status=StepStatus.FAILED, wake_at__isnull=False) & Q(
        attempt__lt=F("attempt_limit")
    )
    moving = Q(
        status__in=[
            StepStatus.PENDING,
            StepStatus.SCHEDULED,
            StepStatus.RUNNING,
            StepStatus.WAITING,
        ]
    )
    in_flight = _steps().filter(moving | retry_due_later)
    if succeeded is not None:
        in_flight = in_flight.exclude(pk=succeeded)
    return in_flight.order_by("-created_at", "-step_key")


# The kind of wait of a step in flight, as `reads.waiting_on` names it (a lapsed lease is
# judged on the clock when read, so the row says `step`).
STEP_WAIT = Case(
    When(status=StepStatus.WAITING, child_run__isnull=False, then=Value(WaitingKind.CHILD)),
    When(status=StepStatus.WAITING, kind=StepKind.APPROVAL, then=Value(WaitingKind.APPROVAL)),
    When(status=StepStatus.WAITING, kind=StepKind.SIGNAL, then=Value(WaitingKind.SIGNAL)),
    When(
        status=StepStatus.SCHEDULED,
        kind=StepKind.SLEEP,
        wake_at__isnull=False,
        then=Value(WaitingKind.TIMER),
    ),
    When(status=StepStatus.FAILED, then=Value(WaitingKind.RETRY)),
    default=Value(WaitingKind.STEP),
    output_field=CharField(),
)


def _waiting_on(status: str | None, succeeded: Any) -> Any:
    """`waiting_on` once the run has `status` (None: the status the row has)."""
    of_step = Subquery(_in_flight(succeeded).annotate(wait=STEP_WAIT).values("wait")[:1])
    running = Coalesce(of_step, Value(WaitingKind.PASS), output_field=CharField())
    if status is None:
        return Case(
            When(status=RunStatus.RUNNING, then=running),
            When(status=RunStatus.SUSPENDED, then=Value(WaitingKind.SUSPEND)),
            When(status=RunStatus.QUEUED, then=Value(WaitingKind.ADMISSION)),
            default=None,
            output_field=CharField(),
        )
    if status in TERMINAL_RUN_STATUSES:
        return None
    if status == RunStatus.QUEUED:
        return Value(WaitingKind.ADMISSION)
    return Value(WaitingKind.SUSPEND) if status == RunStatus.SUSPENDED else running


# `list_field_values(error=...)` when the write leaves the run's error as it is.
KEEP_ERROR = object()


def list_field_values(
    status: str | None = None, error: Any = KEEP_ERROR, succeeded: Any = None
) -> dict[str, Any]:
    """The list fields as expressions for an UPDATE of a run, which leaves it in `status` (None:
    the status the row has) with `error`; `succeeded`: the id of a step the same statement
    records as succeeded (its snapshot, which the expressions read, still has it running)."""
    newest = _steps().order_by("-created_at", "-step_key").values("step_key")[:1]
    failed_step = (
        _steps()
        .filter(status=StepStatus.FAILED, error__isnull=False)
        .order_by("-updated_at")
        .annotate(code=KeyTextTransform("code", "error"))
        .values("code")[:1]
    )
    done = (
        Q(status=StepStatus.SUCCEEDED)
        if succeeded is None
        else Q(status=StepStatus.SUCCEEDED) | Q(pk=succeeded)
    )
    if error is KEEP_ERROR:
        run_code: Any = KeyTextTransform("code", "error")
    else:
        run_code = Value((error or {}).get("code"), output_field=CharField())
    return {
        "steps_total": _count(_steps()),
        "steps_done": _count(_steps().filter(done)),
        "current_step_key": Coalesce(
            Subquery(_in_flight(succeeded).values("step_key")[:1]), Subquery(newest)
        ),
        "waiting_on": _waiting_on(status, succeeded),
        "last_error_code": Coalesce(run_code, Subquery(failed_step), output_field=CharField()),
    }


def parked_list_params(step_keys: list[str]) -> dict[str, Any]:
    """The parameters of `lease_handed_back` (step_transitions.sql), whose write parks the run
    on the new steps `step_keys` it dispatches."""
    return {
        "new_own_steps": sum(ENGINE_KEY_MARK not in key for key in step_keys),
        "current_step_key": step_keys[-1],
        "waiting_step": WaitingKind.STEP.value,
        "succeeded": StepStatus.SUCCEEDED.value,
        "engine_keys": f"%{ENGINE_KEY_MARK}%",
    }


def refresh_list_fields(run_id: Any) -> None:
    """Recompute the run's list fields from its steps (one UPDATE)."""
    WorkflowRun.objects.filter(pk=run_id).update(**list_field_values())
