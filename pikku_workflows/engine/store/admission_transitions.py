"""Admission under a workflow's concurrency rule: a run's slot taken when it is admitted (in
the statement that starts it, `run_rows`) and freed in the transaction that ends it, which
admits the queued runs of that key (no polling). Every step holds the key's count row
(claims), taken before any run row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F
from django.db.models.functions import Greatest

from ...dispatch import prompt_orchestration
from ...flow import Concurrency, OnFull, run_concurrency_key
from ...models import WorkflowRun, WorkflowSlot, WorkflowSlotCount
from ...querysets import DatabaseNow
from ...registry import registry
from ...sql import Statements
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...waiting import WaitingKind
from .claims import lock_admission_key_txn
from .tables import engine_names

STATEMENTS = Statements(
    Path(__file__).with_name("admission_transitions.sql"),
    Path(__file__).with_name("claims.sql"),
    names=engine_names,
)
RULE_PREFIX = "workflow:"


def rule_name(workflow: str) -> str:
    """The `rule` of the slots a workflow's concurrency rule hands out."""
    return f"{RULE_PREFIX}{workflow}"


@dataclass(frozen=True)
class Admission:
    """What admits a new run: its workflow's rule and the key it gave the run's input."""

    workflow: str
    key: str
    rule: Concurrency

    @property
    def rule_name(self) -> str:
        return rule_name(self.workflow)

    @property
    def status_when_full(self) -> str:
        return RunStatus.CANCELLED if self.rule.on_full == OnFull.SKIP else RunStatus.QUEUED


def admission_for(workflow: str, input: Any) -> Admission | None:
    """The admission of a new run of `workflow` with `input`, None when it has no rule;
    InvalidInput when its key function raises or gives no usable key."""
    rule = registry.get_workflow(workflow).concurrency
    if rule is None:
        return None
    return Admission(workflow, run_concurrency_key(rule, workflow, input), rule)


def take_slot_txn(admission: Admission) -> bool:
    """Where the named statements do not apply (SQLite): take a slot of the key if it has room,
    counted; the slot row is written once the run is saved (`save_slot_txn`)."""
    held = lock_admission_key_txn(admission.rule_name, admission.key)
    if held >= admission.rule.max_active:
        return False
    _count(admission.rule_name, admission.key, +1)
    return True


def _count(rule: str, key: str, change: int) -> None:
    WorkflowSlotCount.objects.filter(rule=rule, key=key).update(
        held=Greatest(F("held") + change, 0)
    )


def save_slot_txn(admission: Admission, run_id: Any) -> None:
    WorkflowSlot.objects.create(rule=admission.rule_name, key=admission.key, run_id=run_id)


def holders_of(workflow: str, key: str) -> list[str]:
    """The runs holding the slots of `key` under the workflow's rule, oldest admission first."""
    slots = WorkflowSlot.objects.filter(rule=rule_name(workflow), key=key)
    return [str(pk) for pk in slots.order_by("created_at", "id").values_list("run_id", flat=True)]


def held_slots(run_id: Any) -> list[tuple[str, str]]:
    """The (rule, key) of every slot the run holds."""
    slots = WorkflowSlot.objects.filter(run_id=run_id, step__isnull=True)
    return list(slots.values_list("rule", "key"))


def lock_keys_txn(slots: list[tuple[str, str]]) -> None:
    """Hold the locks of the keys of `slots` (sorted: two enders never wait on each other)."""
    for rule, key in sorted(slots):
        lock_admission_key_txn(rule, key)


def release_slots_txn(run_id: Any, slots: list[tuple[str, str]]) -> list[str]:
    """Free the run's slots (it ended; their keys' locks held, `lock_keys_txn`) and admit the
    runs queued on them; returns the admitted runs' ids."""
    assert transaction.get_connection().in_atomic_block
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["release_slots"], {"run_id": run_id})
    else:
        WorkflowSlot.objects.filter(run_id=run_id, step__isnull=True).delete()
        for rule, key in slots:
            _count(rule, key, -1)
    admitted: list[str] = []
    for rule, key in slots:
        if rule.startswith(RULE_PREFIX):
            admitted += admit_queued_txn(rule.removeprefix(RULE_PREFIX), key, key_locked=True)
    return admitted


def hand_over_slots_txn(run_id: Any, successor_id: Any) -> None:
    """Give the successor of a run that continued as new every slot the run held (their keys'
    locks held, `lock_keys_txn`): the chain keeps its place, so nothing queued on those keys
    is admitted in between, and each key's count stays as it was."""
    assert transaction.get_connection().in_atomic_block
    # A step attempt's slot (a limit's max_running) stays with the attempt that holds it.
    WorkflowSlot.objects.filter(run_id=run_id, step__isnull=True).update(run_id=successor_id)


def admit_queued_txn(workflow: str, key: str, *, key_locked: bool = False) -> list[str]:
    """Admit the queued runs of `workflow` with `key` its rule has room for, earliest effective
    start first; each gets a pass once this transaction commits. Returns their ids.
    `key_locked`: this transaction holds the key's count row already (a run ending freed its
    slot under it), so it is not locked again."""
    assert transaction.get_connection().in_atomic_block
    definition = registry.workflows.get(workflow)
    if definition is None or definition.concurrency is None:
        return []  # a rule gone from the code: recovery's sweep lets its queue go
    rule, max_active = rule_name(workflow), definition.concurrency.max_active
    if not key_locked:
        lock_admission_key_txn(rule, key)
    if connection.vendor == "postgresql":
        admitted = _admit_in_one_statement(workflow, key, rule, max_active)
    else:
        held = WorkflowSlotCount.objects.get(rule=rule, key=key).held
        admitted = _admit_one_by_one(workflow, key, rule, max_active - held)
    for run_id in admitted:
        prompt_orchestration(run_id)
    return admitted


def _admit_in_one_statement(workflow: str, key: str, rule: str, max_active: int) -> list[str]:
    params: dict[str, Any] = {
        "workflow": workflow,
        "key": key,
        "rule": rule,
        "max_active": max_active,
        "run_queued": RunStatus.QUEUED,
        "run_running": RunStatus.RUNNING,
        "waiting_pass": WaitingKind.PASS,
    }
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["admit_queued"], params)
        return [str(row[0]) for row in cursor.fetchall()]


def _admit_one_by_one(workflow: str, key: str, rule: str, room: int) -> list[str]:
    if room <= 0:
        return []
    queued = WorkflowRun.objects.filter(
        workflow=workflow, concurrency_key=key, status=RunStatus.QUEUED
    ).exclude(not_before__gt=DatabaseNow())
    # created_at less priority seconds, as the statement orders them.
    ahead = ExpressionWrapper(
        F("created_at") - F("priority") * timedelta(seconds=1), output_field=DateTimeField()
    )
    admitted = []
    for run_id in queued.order_by(ahead, "id").values_list("pk", flat=True)[:room]:
        moved = WorkflowRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING, updated_at=DatabaseNow(), waiting_on=WaitingKind.PASS
        )
        if moved:
            WorkflowSlot.objects.create(rule=rule, key=key, run_id=run_id)
            _count(rule, key, +1)
            admitted.append(str(run_id))
    return admitted


def admit_stranded(limit: int) -> int:
    """Recovery's sweep: free the slots of runs that ended holding them, and admit the queued
    runs of up to `limit` keys that have room (a slot freed while the next queued run was held
    by another transaction, a rule given a larger `max_active`). Returns the runs admitted."""
    admitted = 0
    ended = WorkflowSlot.objects.filter(run__status__in=TERMINAL_RUN_STATUSES, step__isnull=True)
    for run_id, rule, slot_key in ended.values_list("run_id", "rule", "key")[:limit]:
        with transaction.atomic():
            lock_admission_key_txn(rule, slot_key)
            admitted += len(release_slots_txn(run_id, [(rule, slot_key)]))
    queued = WorkflowRun.objects.filter(status=RunStatus.QUEUED, concurrency_key__isnull=False)
    keys = queued.order_by().values_list("workflow", "concurrency_key").distinct()[:limit]
    for workflow, key in keys:
        with transaction.atomic():
            admitted += len(admit_queued_txn(workflow, key or ""))
    return admitted


def admit_due(limit: int) -> int:
    """The timer loop: admit up to `limit` queued runs whose not_before (a rate) came: without a
    concurrency key at once, with one as their key has room. Returns how many were admitted."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            params: dict[str, Any] = {
                "limit": limit,
                "run_queued": RunStatus.QUEUED,
                "run_running": RunStatus.RUNNING,
                "waiting_pass": WaitingKind.PASS,
            }
            with connection.cursor() as cursor:
                cursor.execute(STATEMENTS["admit_due"], params)
                admitted = [str(row[0]) for row in cursor.fetchall()]
        else:
            admitted = _admit_due_one_by_one(limit)
        for run_id in admitted:
            prompt_orchestration(run_id)
    due_keys = (
        WorkflowRun.objects.filter(
            status=RunStatus.QUEUED, concurrency_key__isnull=False, not_before__lte=DatabaseNow()
        )
        .order_by()
        .values_list("workflow", "concurrency_key")
        .distinct()[:limit]
    )
    count = len(admitted)
    for workflow, key in due_keys:
        with transaction.atomic():
            count += len(admit_queued_txn(workflow, key or ""))
    return count


def _admit_due_one_by_one(limit: int) -> list[str]:
    due = WorkflowRun.objects.filter(
        status=RunStatus.QUEUED, concurrency_key__isnull=True, not_before__lte=DatabaseNow()
    ).order_by("not_before")
    admitted = []
    for run_id in due.values_list("pk", flat=True)[:limit]:
        if WorkflowRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING, updated_at=DatabaseNow(), waiting_on=WaitingKind.PASS
        ):
            admitted.append(str(run_id))
    return admitted
