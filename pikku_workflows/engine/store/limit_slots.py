"""Named limits' `max_running`: a slot per executing step attempt, a row with a lease the
heartbeat renews. Taken in the claim that starts the attempt (under the limit's count-row
lock), freed in the transaction that records the attempt's outcome (or once its lease lapsed);
the transaction that frees a slot hands it to the oldest attempt waiting on the limit and
dispatches it as it commits (no polling).
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest

from ...dispatch import enqueue_orchestration, enqueue_step
from ...exceptions import WorkflowDispatchException
from ...flow import Limit
from ...models import WorkflowLimit, WorkflowSlot, WorkflowSlotCount, WorkflowStep
from ...outages import outages
from ...querysets import DatabaseNow
from ...registry import StepFunctionDefinition, registry
from ...status import StepStatus
from ...waiting import AdmissionReason
from .claims import lock_admission_key_txn, lock_steps_waiting_for_slot_txn
from .leases import step_lease_until
from .step_transitions import move_step_txn

LIMIT_PREFIX = "limit:"
# A limit's slots have one key: max_running bounds the limit as a whole.
LIMIT_KEY = ""


def limit_rule(name: str) -> str:
    """The `rule` of the slots a named limit's `max_running` hands out."""
    return f"{LIMIT_PREFIX}{name}"


def bounded_limits(definition: StepFunctionDefinition) -> list[Limit]:
    """The limits with a `max_running` the step function names, by name (the lock order)."""
    limits = [registry.get_limit(name, definition.name) for name in sorted(definition.limits)]
    return [limit for limit in limits if limit.max_running is not None]


def holds_slots(definition: StepFunctionDefinition) -> bool:
    """Whether the step function's attempts take slots (it names a limit with `max_running`)."""
    limits = (registry.limits.get(name) for name in definition.limits)
    return any(limit is not None and limit.max_running is not None for limit in limits)


def take_slots_txn(step: WorkflowStep, limits: list[Limit], attempt: int) -> Limit | None:
    """Inside the claim's transaction (the step row locked): a slot of each limit for the
    attempt `attempt` about to start, leased; a slot already handed to the step (a freed slot
    given to it while it waited) is kept, one its lapsed attempt left is freed first. Returns
    the first limit that is full, having given back the slots this call took (the attempt must
    wait), else None."""
    assert transaction.get_connection().in_atomic_block
    taken: list[str] = []
    for limit in limits:
        rule = limit_rule(limit.name)
        held = lock_admission_key_txn(rule, LIMIT_KEY)
        own = WorkflowSlot.objects.filter(step=step, rule=rule)
        # A lapsed attempt's slot goes to the steps waiting first, as the timer loop would.
        if _free_txn(own.filter(lease_expires_at__lt=DatabaseNow()), rule):
            held = WorkflowSlotCount.objects.get(rule=rule, key=LIMIT_KEY).held
        if own.update(attempt=attempt, lease_expires_at=step_lease_until()):
            continue  # handed to this step while it waited
        # Every bound is at least 1: a limit none of whose slots is held has room.
        if held and held >= running_bound_txn(limit):
            for rule_taken in taken:
                _free_txn(WorkflowSlot.objects.filter(step=step, rule=rule_taken), rule_taken)
            return limit
        WorkflowSlot.objects.create(
            rule=rule,
            key=LIMIT_KEY,
            run_id=step.run_id,
            step=step,
            attempt=attempt,
            lease_expires_at=step_lease_until(),
        )
        _count(rule, +1)
        taken.append(rule)
    return None


def running_bound_txn(limit: Limit) -> int:
    """Inside a transaction holding the limit's count row: its `max_running` as it applies now,
    an operator's (`set_running_bound_txn`) else the code's. Read under that lock, so a claim
    or a hand-over judges by the bound an edit committed before it."""
    assert limit.max_running is not None
    edited = WorkflowLimit.objects.filter(
        name=limit.name, managed_by=WorkflowLimit.ManagedBy.ADMIN, max_running__isnull=False
    )
    return edited.values_list("max_running", flat=True).first() or limit.max_running


def set_running_bound_txn(limit: Limit, max_running: int | None) -> None:
    """Inside the transaction that edits the limit's row: its operator's `max_running` (None:
    the code's applies), written under the count row's lock, and the room a larger bound makes
    handed to the waiting attempts at once. A smaller bound evicts no one: the attempts
    executing finish, and no slot is handed out until fewer than the bound are held."""
    rule = limit_rule(limit.name)
    lock_admission_key_txn(rule, LIMIT_KEY)
    WorkflowLimit.objects.filter(name=limit.name).update(max_running=max_running)
    _hand_over_txn(rule)


def wait_for_slot_txn(step: WorkflowStep, limit: Limit) -> None:
    """Inside the claim's transaction: the attempt waits for a slot of `limit`, its step
    pending (or failed with its retry due) with no timer: the transaction that frees a slot
    hands it over and dispatches the step. `not_before` notes the rates were taken."""
    hold: dict[str, Any] = {
        "admission_hold": {
            "reason": AdmissionReason.CONCURRENCY.value,
            "limit": limit.name,
            "key": LIMIT_KEY,
        },
        "not_before": step.not_before or DatabaseNow(),
        "wake_at": None,
    }
    if step.status == StepStatus.SCHEDULED:
        move_step_txn(step, StepStatus.PENDING, expected=[StepStatus.SCHEDULED], **hold)
        return
    WorkflowStep.objects.filter(pk=step.pk, attempt=step.attempt).update(**hold)
    step.admission_hold, step.wake_at = hold["admission_hold"], None


def release_slots_txn(step_id: Any, attempt: int) -> int:
    """Inside the transaction that records the attempt's outcome (its step row written first:
    a claim locks the step, then the limit): free its limits' slots, each handed to the next
    waiting attempt, so the outcome and the freed slot commit together. Returns how many."""
    assert transaction.get_connection().in_atomic_block
    freed = 0
    slots = WorkflowSlot.objects.filter(step_id=step_id, attempt=attempt)
    for rule in sorted(slots.values_list("rule", flat=True)):
        lock_admission_key_txn(rule, LIMIT_KEY)
        freed += _free_txn(slots.filter(rule=rule), rule)
    return freed


def release_slots(step_id: Any, attempt: int) -> int:
    """The attempt ended without its outcome being recorded (a newer attempt or a cancel
    refused it): free its slots in a transaction of their own. Returns how many."""
    with transaction.atomic():
        return release_slots_txn(step_id, attempt)


def free_lapsed_slots(limit: int) -> int:
    """The timer loop: free up to `limit` slots whose holder stopped renewing their lease (its
    process died), each handed to the next waiting attempt. Returns how many it freed."""
    lapsed = WorkflowSlot.objects.filter(lease_expires_at__lt=DatabaseNow())
    freed = 0
    for slot_id, rule in lapsed.values_list("pk", "rule")[:limit]:
        with transaction.atomic():
            lock_admission_key_txn(rule, LIMIT_KEY)
            # Judged again under the key's lock: a heartbeat may have renewed it meanwhile.
            freed += _free_txn(lapsed.filter(pk=slot_id), rule)
    return freed


def _free_txn(slots: Any, rule: str) -> int:
    """Delete `slots` (of `rule`, whose count row this transaction holds), uncount them and
    hand the room to the attempts waiting on the limit."""
    deleted, _ = slots.delete()
    if deleted:
        _count(rule, -deleted)
        _hand_over_txn(rule)
    return int(deleted)


def _hand_over_txn(rule: str) -> None:
    """Give the limit's free slots to its waiting attempts, oldest step first, each leased and
    its step dispatched as this transaction commits; a step another transaction holds is
    skipped (the next slot freed, or recovery's relay, reaches it)."""
    limit = registry.limits.get(rule.removeprefix(LIMIT_PREFIX))
    if limit is None or limit.max_running is None:
        return
    held = WorkflowSlotCount.objects.get(rule=rule, key=LIMIT_KEY).held
    room = running_bound_txn(limit) - held
    if room <= 0:
        return
    for step in lock_steps_waiting_for_slot_txn(limit.name, room):
        WorkflowSlot.objects.create(
            rule=rule,
            key=LIMIT_KEY,
            run_id=step.run_id,
            step=step,
            attempt=step.attempt,
            lease_expires_at=step_lease_until(),
        )
        _count(rule, +1)
        WorkflowStep.objects.filter(pk=step.pk).update(admission_hold=None)
        transaction.on_commit(functools.partial(_dispatch, step))


def _dispatch(step: WorkflowStep) -> None:
    definition = registry.step_functions.get(step.function_name or "")
    try:
        if definition is not None and not definition.inline:
            enqueue_step(step.run_id, step.step_key, definition.queue)
        else:
            enqueue_orchestration(step.run_id)
    except WorkflowDispatchException as exc:
        # The step is pending with no timer: recovery relays it from the table.
        outages.failed(f"dispatching step {step.step_key!r} a freed slot admitted", exc)


def _count(rule: str, change: int) -> None:
    WorkflowSlotCount.objects.filter(rule=rule, key=LIMIT_KEY).update(
        held=Greatest(F("held") + change, 0)
    )
