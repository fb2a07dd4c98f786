"""Operator control of runs: cancel, suspend, resume, retry and fork, each audited; and the
operations table (`OPERATION_RULES`: each action's function, permission and the statuses it
accepts), which the admin, the API and the `pikku` command offer from (docs/architecture.md §7).

Each checks its arguments, then the run's status: an illegal move is `InvalidTransition` with
nothing written; a target status that already holds is a quiet success that writes nothing;
otherwise the status change and one `WorkflowAuditEntry` commit together, and queue messages go
out after the commit (a refused one is logged; recovery relays the run).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Case, CharField, F, Q, Value, When

from ... import events
from ...dispatch import enqueue_orchestration
from ...exceptions import (
    ConcurrencyReplaced,
    InvalidInput,
    InvalidTransition,
    WorkflowCancelled,
    WorkflowDispatchException,
    WorkflowError,
    WorkflowSuspended,
)
from ...flow import OnFull
from ...models import WorkflowAuditEntry, WorkflowRun, WorkflowStep
from ...querysets import DatabaseNow
from ...registry import registry
from ...serialization import describe_error
from ...status import TERMINAL_RUN_STATUSES, Compensation, RunStatus, StepStatus
from ...step_keys import COMPENSATION_SUFFIX, HANDLER_SUFFIX
from ...validation import KEY_MAX_LENGTH, REASON_MAX_LENGTH, checked_text
from ..replay import children
from ..store.admission_transitions import admit_queued_txn, held_slots, holders_of, rule_name
from ..store.approval_transitions import cancel_pending_approvals_txn
from ..store.claims import lock_admission_key_txn, share_run_txn
from ..store.run_rows import create_run_row
from ..store.run_transitions import begin_compensation, move_run
from ..store.step_transitions import create_step_txn, move_step_txn
from .reads import get_run_status, missing_run, run_pk
from .rules import Apply, Flag, Rule
from .timers import dispatch_woken
from .users import checked_user

logger = logging.getLogger(__name__)

# A run that keeps changing between our read and our guarded write is refused after this many
# tries rather than chased forever.
OPERATION_TRIES = 3


def cancel_run(
    run_id: Any, *, reason: str = "", by: Any = None, compensate: bool = False
) -> dict[str, Any]:
    """Cancel a running or suspended run, its armed timers and its live child runs.

    A step already running finishes and its result is recorded, but the run does not advance:
    every later write of the pass is guarded on the run being `running`.

    With `compensate=True` its succeeded steps are undone first (`compensate=` on their step
    functions, docs/code-workflows.md "Compensation"): the run stays running, undoing them one
    by one (steps already on their way finish first and are undone too), and ends cancelled.
    """
    pk, reason, by = _checked(run_id, reason, by)
    if not isinstance(compensate, bool):
        raise InvalidInput("compensate must be True or False.")
    if compensate:
        _operate(pk, CANCEL, lambda pk, before: _cancel_compensating_txn(pk, before, reason, by))
        return get_run_status(pk)
    if _operate(pk, CANCEL, lambda pk, before: _cancel_txn(pk, before, reason, by)):
        # A run cancelled on its own (not with its parent) ends its parent's step like a
        # failure would, so the parent is not left waiting on it forever.
        children.notify_parent(pk)
    return get_run_status(pk)


def suspend_run(run_id: Any, *, reason: str = "", by: Any = None) -> dict[str, Any]:
    """Suspend a running run: it starts nothing new until resumed; running steps finish."""
    pk, reason, by = _checked(run_id, reason, by)
    error = _operator_error(WorkflowSuspended(reason or "Suspended by an operator."))

    def apply_txn(pk: uuid.UUID, before: str) -> None:
        move_run(pk, RunStatus.SUSPENDED, expected=[before], error=error)
        _audit(pk, SUSPEND.action, before, SUSPEND.target, by, reason)

    _operate(pk, SUSPEND, apply_txn)
    return get_run_status(pk)


def resume_run(run_id: Any, *, by: Any = None, reason: str = "") -> dict[str, Any]:
    """Move a suspended run (by an operator, `wf.suspend` or RPC_NOT_FOUND) back to running and
    enqueue a pass; a running run is left as is. A run suspended before its concurrency rule
    admitted it goes back to the queue (and is admitted at once if its key has room)."""
    pk, reason, by = _checked(run_id, reason, by)

    def apply_txn(pk: uuid.UUID, before: str) -> None:
        if _requeue_txn(pk, before):
            _audit(pk, RESUME.action, before, RunStatus.QUEUED, by, reason)
            return
        move_run(pk, RunStatus.RUNNING, expected=[before], error=None)
        _audit(pk, RESUME.action, before, RESUME.target, by, reason)
        enqueue_orchestration(pk)
        scheduled = _scheduled_steps(pk)
        if scheduled:
            transaction.on_commit(lambda: _relay_steps(pk, scheduled))

    _operate(pk, RESUME, apply_txn)
    return get_run_status(pk)


def retry_run(run_id: Any, *, by: Any = None, reason: str = "") -> dict[str, Any]:
    """Give a failed run's exhausted steps a fresh budget of `retries + 1` attempts and run it
    again; steps that succeeded are not re-run. A running run is left as is. A run whose
    compensation failed retries its compensations, not its body; a compensated run cannot be
    retried (what it would reuse was undone)."""
    pk, reason, by = _checked(run_id, reason, by)

    def apply_txn(pk: uuid.UUID, before: str) -> None:
        compensation = _compensation_of(pk)
        if compensation == Compensation.COMPENSATED:
            raise InvalidTransition(
                f"run {pk} (retry)",
                before,
                RETRY.target or "",
                message=f"Run {pk} cannot be retried: its steps were undone (compensated). "
                "Fork it to run its workflow again.",
            )
        # The steps before the run row (the lock order of claims.sql); a refused move rolls back.
        undoing = compensation == Compensation.FAILED
        rearmed = [_rearm_step_txn(step) for step in _exhausted_steps(pk, undoing)]
        fields: dict[str, Any] = {"compensation": Compensation.RUNNING} if undoing else {}
        move_run(pk, RunStatus.RUNNING, expected=[before], error=None, output=None, **fields)
        _audit(pk, RETRY.action, before, RETRY.target, by, reason, steps=rearmed)
        enqueue_orchestration(pk)

    _operate(pk, RETRY, apply_txn)
    return get_run_status(pk)


def fork_run(run_id: Any, *, from_step: str, by: Any = None, reason: str = "") -> str:
    """Start a new run of the same workflow and input that reuses the results of the steps
    recorded before `from_step` and executes again from there; returns the new run's id.

    The source must have ended. The fork is always queued (an operator's request must not run
    a workflow body in the web process) and linked by `forked_from`; the fork is audited on both
    runs: the source's row names the new run, the new run's names its source.
    """
    pk, reason, by = _checked(run_id, reason, by)
    checked_text(from_step, "from_step", max_length=KEY_MAX_LENGTH)
    source = WorkflowRun.objects.filter(pk=pk).first()
    if source is None:
        raise missing_run(run_id)
    if source.status not in FORK.sources:
        raise InvalidTransition(f"run {pk} ({FORK.action})", source.status, FORK.past)
    reused = _steps_before(pk, from_step)
    with transaction.atomic():
        # Held while the fork is written: a purge skips the source, or has purged it already.
        if share_run_txn(pk) is None:
            raise missing_run(run_id)
        fork = create_run_row(
            source.workflow,
            source.input,
            inline=False,
            forked_from_id=pk,
            started_by_id=by.pk if by is not None else source.started_by_id,
            subject_type_id=source.subject_type_id,
            subject_id=source.subject_id,
        )
        for step in reused:
            _copy_step_txn(fork.pk, step)
        _audit(
            pk,
            FORK.action,
            source.status,
            source.status,
            by,
            reason,
            new_run_id=str(fork.pk),
            from_step=from_step,
            copied_steps=[step.step_key for step in reused],
        )
        _audit(
            fork.pk,
            FORK.action,
            "",
            RunStatus.RUNNING,
            by,
            reason,
            forked_from=str(pk),
            from_step=from_step,
            copied_steps=[step.step_key for step in reused],
        )
        enqueue_orchestration(fork.pk)
    return str(fork.pk)


# The operations table: one row per operator action. The admin's actions and buttons, the API's
# routes and bulk operations and the `pikku` command's verbs are built from it (a new operation
# is a row here plus its permission on `WorkflowRun.Meta`). The rows follow the functions that
# read them back (`_operate(pk, CANCEL, ...)`), so each row can name its function.
CANCEL = Rule(
    "cancel",
    RunStatus.CANCELLED,
    frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUSPENDED}),
    "cancelled",
    cancel_run,
    "cancel_workflowrun",
    caution="Unless you ask for compensation, completed steps are not undone: no on_error "
    "handler runs and what they did stays done. A step running now finishes, but the run does "
    "not go on, and its child runs are cancelled too.",
    flags=(
        Flag(
            "compensate",
            "Undo completed steps first",
            "Runs the compensations of its succeeded steps (their step function's compensate=), "
            "latest first, as durable steps; the run ends cancelled once they succeed.",
        ),
    ),
)
SUSPEND = Rule(
    "suspend",
    RunStatus.SUSPENDED,
    frozenset({RunStatus.QUEUED, RunStatus.RUNNING}),
    "suspended",
    suspend_run,
    "suspend_workflowrun",
)
RESUME = Rule(
    "resume",
    RunStatus.RUNNING,
    frozenset({RunStatus.SUSPENDED}),
    "resumed",
    resume_run,
    "resume_workflowrun",
)
RETRY = Rule(
    "retry",
    RunStatus.RUNNING,
    frozenset({RunStatus.FAILED}),
    "retried",
    retry_run,
    "retry_workflowrun",
)
FORK = Rule(
    "fork",
    None,
    TERMINAL_RUN_STATUSES,
    "forked",
    fork_run,
    "fork_workflowrun",
    bulk=False,
    caution="The steps listed below execute again in the new run, with their side effects (a "
    "card charged, an e-mail sent): the new run has its own invocation ids, so an idempotency "
    "key built from ctx.invocation_id does not protect against them.",
)
OPERATION_RULES = {rule.action: rule for rule in (CANCEL, SUSPEND, RESUME, RETRY, FORK)}


def _checked(run_id: Any, reason: Any, by: Any) -> tuple[uuid.UUID, str, Any]:
    """The run's key, the reason and the acting user, each checked before anything is read."""
    pk = run_pk(run_id)
    checked_text(reason, "The reason", max_length=REASON_MAX_LENGTH, allow_empty=True)
    return pk, reason, checked_user(by, "by")


def _operator_error(why: Exception) -> dict[str, Any]:
    return describe_error(why, traceback=False)


def _operate(pk: uuid.UUID, rule: Rule, apply_txn: Apply) -> bool:
    """Apply `rule` to the run: True when it changed, False when the target already held."""
    for _ in range(OPERATION_TRIES):
        before = _status_of(pk)
        if before == rule.target:
            return False
        if before not in rule.sources:
            raise InvalidTransition(f"run {pk} ({rule.action})", before, rule.target or "")
        try:
            with transaction.atomic():
                apply_txn(pk, before)
            return True
        except InvalidTransition:
            # The guarded write found another status: someone moved the run since our read
            # (decide again), or the refusal is about something else (let it through).
            if _status_of(pk) == before:
                raise
    raise InvalidTransition(f"run {pk} ({rule.action})", _status_of(pk), rule.target or "")


def _status_of(pk: uuid.UUID) -> str:
    status = WorkflowRun.objects.filter(pk=pk).values_list("status", flat=True).first()
    if status is None:
        raise missing_run(pk)
    return status


def _audit(
    pk: uuid.UUID,
    action: str,
    before: str,
    after: str | None,
    by: Any,
    reason: str,
    **payload: Any,
) -> None:
    WorkflowAuditEntry.objects.create(
        run_id=pk,
        action=action,
        user=by,
        reason=reason,
        payload={"status_before": before, "status_after": after, **payload},
    )
    events.announce_operator_action(pk, action, by, reason, before, after)


def _requeue_txn(pk: uuid.UUID, before: str) -> bool:
    """Put a suspended run that was never admitted back in its key's queue and admit what the
    key has room for; False when the run was admitted before it was suspended."""
    run = (
        WorkflowRun.objects.filter(pk=pk)
        .annotate(time_ahead=Q(not_before__gt=DatabaseNow()))
        .values("workflow", "concurrency_key", "time_ahead")
        .first()
    )
    if run is None:
        return False
    if run["concurrency_key"] is None:
        # Held only by time (a rate's or a debounce's): back in the queue until that time, which
        # the timer loop admits at; a time already past was its admission.
        if not run["time_ahead"]:
            return False
        move_run(pk, RunStatus.QUEUED, expected=[before], error=None, debounce_key=None)
        return True
    workflow, key = run["workflow"], run["concurrency_key"]
    lock_admission_key_txn(rule_name(workflow), key)
    if held_slots(pk):
        return False
    # Back in the queue but not in a debounce window: that closed when it was suspended (and
    # another start of its key may have opened the next one since).
    move_run(pk, RunStatus.QUEUED, expected=[before], error=None, debounce_key=None)
    admit_queued_txn(workflow, key)
    return True


def _cancel_txn(
    pk: uuid.UUID,
    before: str,
    reason: str,
    by: Any,
    *,
    why: WorkflowError | None = None,
    **payload: Any,
) -> None:
    """Cancel one run and, depth first, its live children; every run gets its own audit row.
    `why` is the error the run ends with (an operator's cancel unless given)."""
    error = _operator_error(why or WorkflowCancelled(reason or "Cancelled by an operator."))
    # Its steps before the run row (the lock order of claims.sql); a refused move rolls back.
    disarmed = _disarm_timers_txn(pk)
    closed = cancel_pending_approvals_txn(pk)
    # A plain cancel stops an undo under way where it is: nothing is compensating any more.
    stopped = Case(
        When(compensation=Compensation.RUNNING, then=Value(None)),
        default=F("compensation"),
        output_field=CharField(),
    )
    move_run(
        pk, RunStatus.CANCELLED, expected=[before], error=error, wake_at=None, compensation=stopped
    )
    events.announce_run_finished(pk, RunStatus.CANCELLED, error)
    cancelled = _cancel_children_txn(pk, reason, by)
    _audit(
        pk,
        CANCEL.action,
        before,
        CANCEL.target,
        by,
        reason,
        disarmed_timers=disarmed,
        cancelled_children=cancelled,
        **({"cancelled_approvals": closed} if closed else {}),
        **payload,
    )


def _disarm_timers_txn(pk: uuid.UUID) -> list[str]:
    """Clear the run's pending timers (sleeps, retry backoffs, expiries): none may fire now."""
    armed = WorkflowStep.objects.filter(run_id=pk, wake_at__isnull=False)
    keys = list(armed.order_by("created_at", "step_key").values_list("step_key", flat=True))
    armed.update(wake_at=None, updated_at=DatabaseNow())
    return keys


def _cancel_compensating_txn(pk: uuid.UUID, before: str, reason: str, by: Any) -> None:
    """Cancel with compensation: nothing new starts (timers disarmed, retries spent, approvals
    closed, children cancelled), and the run's next pass undoes its succeeded steps; it ends
    cancelled once they are undone. A run undoing its steps already goes on doing so."""
    if _compensation_of(pk) == Compensation.RUNNING:
        return
    error = _operator_error(WorkflowCancelled(reason or "Cancelled by an operator."))
    disarmed = _disarm_timers_txn(pk)
    WorkflowStep.objects.filter(run_id=pk).retrying().update(
        attempt_limit=F("attempt"), updated_at=DatabaseNow()
    )
    closed = cancel_pending_approvals_txn(pk)
    if before == RunStatus.SUSPENDED:
        move_run(pk, RunStatus.RUNNING, expected=[before], error=None)
    begin_compensation(pk, error)
    cancelled = _cancel_children_txn(pk, reason, by)
    _audit(
        pk,
        CANCEL.action,
        before,
        RunStatus.RUNNING,
        by,
        reason,
        compensate=True,
        disarmed_timers=disarmed,
        cancelled_children=cancelled,
        **({"cancelled_approvals": closed} if closed else {}),
    )
    enqueue_orchestration(pk)


def _cancel_children_txn(pk: uuid.UUID, reason: str, by: Any) -> list[str]:
    live = WorkflowRun.objects.filter(
        parent_run_id=pk, status__in=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.SUSPENDED]
    ).order_by("created_at")
    child_reason = f"Parent run {pk} was cancelled" + (f": {reason}" if reason else ".")
    cancelled = []
    for child_pk, status in live.values_list("pk", "status"):
        try:
            with transaction.atomic():  # a savepoint: a child that moved on rolls back alone
                _cancel_txn(child_pk, status, child_reason, by, parent_run_id=str(pk))
        except InvalidTransition:
            # The child ended (or was cancelled) since we listed it: nothing left to cancel.
            continue
        cancelled.append(str(child_pk))
    return cancelled


def _scheduled_steps(pk: uuid.UUID) -> list[tuple[str, str | None]]:
    """Queued steps dispatched before a suspend: a worker that got the message while the run was
    suspended could not claim it, and recovery would relay it only much later."""
    scheduled = WorkflowStep.objects.filter(
        run_id=pk, status=StepStatus.SCHEDULED, wake_at__isnull=True
    )
    return list(scheduled.values_list("step_key", "function_name"))


def _relay_steps(pk: uuid.UUID, steps: list[tuple[str, str | None]]) -> None:
    # A redundant message is harmless: the worker's claim decides who runs the step.
    for step_key, function_name in steps:
        try:
            dispatch_woken(pk, step_key, function_name)
        except WorkflowDispatchException:
            logger.warning("pikku_workflows: relay of %s failed; recovery will retry", step_key)


def _exhausted_steps(pk: uuid.UUID, compensations: bool = False) -> list[WorkflowStep]:
    """The steps retry re-arms: failed with no attempts left; the compensations only, when
    those failed. `on_error` handlers are left as they are: a handler runs once per step, and a
    re-armed one would stay pending for ever once its step succeeds."""
    exhausted = WorkflowStep.objects.filter(
        run_id=pk, status=StepStatus.FAILED, attempt__gte=F("attempt_limit")
    ).exclude(step_key__endswith=HANDLER_SUFFIX)
    if compensations:
        exhausted = exhausted.filter(step_key__endswith=COMPENSATION_SUFFIX)
    return list(exhausted.order_by("created_at", "step_key"))


def _compensation_of(pk: uuid.UUID) -> str | None:
    return WorkflowRun.objects.filter(pk=pk).values_list("compensation", flat=True).first()


def _rearm_step_txn(step: WorkflowStep) -> dict[str, Any]:
    """Open a new attempt in `pending` with `retries + 1` attempts to go; the attempt number
    carries on (it fences out any worker still holding an older attempt)."""
    limit = step.attempt + step.retries + 1
    previous = step.attempt
    moved = move_step_txn(
        step,
        StepStatus.PENDING,
        expected=[StepStatus.FAILED],
        new_attempt=True,
        attempt_limit=limit,
        result=None,
        error=None,
        wake_at=None,
        lease_expires_at=None,
    )
    if not moved:
        raise InvalidTransition(f"step {step.step_key!r}", step.status, StepStatus.PENDING)
    return {"step_key": step.step_key, "attempt": previous, "attempt_limit": limit}


def split_for_fork(steps: Sequence[tuple[str, str]], from_step: str) -> tuple[list[str], list[str]]:
    """For a fork from `from_step`: the keys whose results it reuses (the succeeded steps before
    it) and the keys recorded in the source that execute again (every other one); `steps` are
    (key, status) in the order the source created them. The admin previews a fork with it."""
    keys = [key for key, _ in steps]
    if from_step not in keys:
        raise InvalidInput(f"There is no step {from_step!r} to fork from; the steps are {keys}.")
    before = keys.index(from_step)
    reused = [key for key, status in steps[:before] if status == StepStatus.SUCCEEDED]
    kept = set(reused)
    return reused, [key for key in keys if key not in kept]


def _steps_before(pk: uuid.UUID, from_step: Any) -> list[WorkflowStep]:
    """The succeeded steps recorded before `from_step`, in the order the source created them."""
    steps = list(WorkflowStep.objects.filter(run_id=pk).order_by("created_at", "step_key"))
    try:
        reused, _ = split_for_fork([(s.step_key, s.status) for s in steps], from_step)
    except InvalidInput as exc:
        raise InvalidInput(f"Run {pk}: {exc.message}") from None
    return [step for step in steps if step.step_key in reused]


def _copy_step_txn(fork_pk: uuid.UUID, step: WorkflowStep) -> WorkflowStep:
    """Record a source step's result in the fork as a succeeded first attempt, marked copied:
    replay returns it without calling the step function."""
    return create_step_txn(
        fork_pk,
        step.step_key,
        status=StepStatus.SUCCEEDED,
        copied=True,
        kind=step.kind,
        function_name=step.function_name,
        data=step.data,
        result=step.result,
        retries=step.retries,
        attempt_limit=step.retries + 1,
        retry_delay=step.retry_delay,
        timeout_ms=step.timeout_ms,
        from_step_key=step.from_step_key,
        branch_taken=step.branch_taken,
        child_run_id=step.child_run_id,
        atomic=step.atomic,
        gather_key=step.gather_key,
    )


def settle_refused_txn(run: WorkflowRun) -> None:
    """Inside the transaction that started `run` and was refused a slot (its key's lock held):
    audit a run its rule skipped; make room for a run whose rule replaces, by cancelling the
    oldest active runs of its key (CONCURRENCY_REPLACED, audited), whose freed slots admit it."""
    rule = registry.get_workflow(run.workflow).concurrency
    assert rule is not None and run.concurrency_key is not None
    held_by = holders_of(run.workflow, run.concurrency_key)
    if run.status == RunStatus.CANCELLED:
        reason = run.error["message"] if run.error else ""
        _audit(
            run.pk,
            CANCEL.action,
            "",
            RunStatus.CANCELLED,
            None,
            reason,
            on_full=rule.on_full,
            held_by=held_by,
        )
        events.announce_run_finished(run.pk, RunStatus.CANCELLED, run.error, workflow=run.workflow)
        return
    if rule.on_full != OnFull.REPLACE:
        return
    why = ConcurrencyReplaced(
        f"Replaced by run {run.pk}: {run.workflow!r} admits {rule.max_active} run(s) with key "
        f'{run.concurrency_key!r} at a time (on_full="replace").'
    )
    for holder in held_by[: len(held_by) - rule.max_active + 1]:
        _replace_txn(uuid.UUID(holder), run, why)


def _replace_txn(pk: uuid.UUID, successor: WorkflowRun, why: ConcurrencyReplaced) -> None:
    """Cancel the active run `pk` for `successor` (one savepoint: a run that an operator moved
    meanwhile is left as it is, and the successor waits for the next free slot)."""
    try:
        with transaction.atomic():
            before = _status_of(pk)
            if before not in CANCEL.sources:
                return
            _cancel_txn(
                pk,
                before,
                why.message,
                None,
                why=why,
                on_full=OnFull.REPLACE,
                replaced_by=str(successor.pk),
            )
    except InvalidTransition:
        return
    transaction.on_commit(lambda: children.notify_parent(pk))
