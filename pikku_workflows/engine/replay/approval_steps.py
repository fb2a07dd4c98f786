"""What `wf.approval` does during a replay: the first reach opens the approval and parks its
step (`waiting`; the run stays running); every later reach returns the recorded outcome once
decisions or the deadline settled it. A replay never opens a second approval for the same
attempt, nor reopens a settled one: it only reads the step."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...approvals.forms import form_path
from ...approvals.policy import ApprovalOutcome, ApprovalRequest, approval_id_for, checked_request
from ...control_flow import RunParked
from ...exceptions import ApprovalExpired, NonDeterministicReplay
from ...models import WorkflowStep
from ...registry import validate_step_key
from ...status import StepKind, StepStatus
from ..store.approval_rows import open_approval_txn
from ..store.claims import lock_running_run_txn
from ..store.step_transitions import park_step_txn
from .attempts import record_kept
from .replay_pass import ReplayPass


def run_approval(rp: ReplayPass, key: str, options: dict[str, Any]) -> ApprovalOutcome:
    """`wf.approval(key, **options)`."""
    validate_step_key(key)
    physical, from_key = rp.allocate_key(key)
    return approval_at(rp, physical, from_key, options)


def approval_at(
    rp: ReplayPass,
    key: str,
    from_key: str | None,
    options: dict[str, Any],
    *,
    data: Any = None,
) -> ApprovalOutcome:
    """The approval step `key` (already allocated): its outcome once settled; RunParked while
    it waits; ApprovalExpired when it expired with on_expire="fail". `data` is what the step row
    keeps of its request (a graph node keeps its options, to re-open it after a retry)."""
    request = checked_request(form=form_path(options.get("form")), **_without_form(options))
    step = rp.steps.get(key)
    if step is not None and step.kind != StepKind.APPROVAL:
        raise NonDeterministicReplay(key, step.function_name or step.kind, StepKind.APPROVAL)
    if step is None or step.status == StepStatus.PENDING:
        # First reach, or a new attempt after retry_run re-armed an expired one.
        step = _open(rp, key, from_key, request, step, data)
    if step.status == StepStatus.SUCCEEDED:
        rp.consume(step)
        return ApprovalOutcome.from_result(step.result or {})
    if step.status == StepStatus.FAILED:
        # Expired with on_expire="fail": the body may catch it, else the run fails with it.
        rp.consume(step)
        raise ApprovalExpired(key, approval_id_for(step.pk, step.attempt))
    raise RunParked(key)


def _without_form(options: dict[str, Any]) -> dict[str, Any]:
    return {option: value for option, value in options.items() if option != "form"}


def _open(
    rp: ReplayPass,
    key: str,
    from_key: str | None,
    request: ApprovalRequest,
    step: WorkflowStep | None,
    data: Any,
) -> WorkflowStep:
    """Park the step and open its approval in one commit (a crash can leave neither half);
    the step's timer is the deadline, on the database clock."""
    record_kept(rp)
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        step = park_step_txn(
            rp.run.pk,
            key,
            step,
            kind=StepKind.APPROVAL,
            data=data,
            from_step_key=from_key,
            wake_in_ms=request.expires_in_ms,
        )
        open_approval_txn(rp.run, step, request)
    rp.steps[key] = step
    return step
