"""Suspending a run from inside its pass: the step that asked and the run's status in one commit."""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import transaction

from ...control_flow import SuspendRequested
from ...exceptions import WorkflowError
from ...status import RunStatus, StepStatus
from ..store.claims import lock_running_run_txn
from ..store.run_transitions import move_run
from ..store.step_transitions import create_step_txn
from .attempts import record_kept
from .replay_pass import ReplayPass


def suspend_in_pass(
    rp: ReplayPass,
    why: WorkflowError,
    *,
    step_key: str,
    step_fields: dict[str, Any] | None,
    step_result: Any = None,
) -> NoReturn:
    """Create the asking step (`step_fields` given) and suspend the run with `why` as its error,
    then stop the body. One transaction: a crash can't leave a recorded suspend step on a run
    that kept running."""
    record_kept(rp)
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        if step_fields is not None:
            status = StepStatus.SUCCEEDED if step_result is not None else StepStatus.PENDING
            rp.steps[step_key] = create_step_txn(
                rp.run.pk, step_key, status=status, result=step_result, **step_fields
            )
        move_run(
            rp.run.pk,
            RunStatus.SUSPENDED,
            expected=[RunStatus.RUNNING],
            lease_holder=rp.holder,
            error={"code": why.code, "message": why.message, "step_key": step_key},
        )
    raise SuspendRequested(why.message, why.code)
