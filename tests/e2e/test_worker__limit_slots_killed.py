"""kill -9 of the worker whose attempts hold a limit's `max_running` slots: every slot is freed
within one lease of its lapse and handed at once to the attempts waiting on the limit, which
run on the surviving worker; the killed attempts are taken over after them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowSlot, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.e2e.conftest import WORKER_SETTINGS
from tests.faults import database_now

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

LEASE_SECONDS = float(WORKER_SETTINGS["PIKKU_STEP_LEASE_SECONDS"])
RULE = "limit:e2e.vendor"


def attempts(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def slot_holds(run_ids: list[str]) -> list:
    """What holds each run's step (its `admission_hold`: None once it is not waiting)."""
    steps = WorkflowStep.objects.filter(run_id__in=run_ids, step_key="call")
    return [step.admission_hold for step in steps]


def all_wait_for_a_slot(run_ids: list[str]) -> bool:
    holds = slot_holds(run_ids)
    return len(holds) == len(run_ids) and all(h and h["reason"] == "concurrency" for h in holds)


def test_worker__killed_slot_holders_free_every_slot_within_one_lease_and_waiters_run_next(
    start_worker, tmp_path
):
    log = tmp_path / "attempts.jsonl"
    doomed = start_worker()
    holders = [
        pw.start_workflow("e2e.limited_call", {"log": str(log), "seconds": 120}) for _ in range(2)
    ]
    wait_until(lambda: len(attempts(log)) == 2, 60, "both slots to be taken by the doomed worker")
    assert WorkflowSlot.objects.filter(rule=RULE).count() == 2
    start_worker()
    waiters = [
        pw.start_workflow("e2e.limited_call", {"log": str(log), "seconds": 0}) for _ in range(2)
    ]
    wait_until(lambda: all_wait_for_a_slot(waiters), 60, "the surviving worker's claims to wait")

    # Seconds after they were taken (a worker started meanwhile), the heartbeat still renews
    # both slots' leases.
    renewed = WorkflowSlot.objects.filter(rule=RULE, lease_expires_at__gt=database_now())
    assert {str(run_id) for run_id in renewed.values_list("step__run_id", flat=True)} == set(
        holders
    )
    killed_at = database_now()
    doomed.kill_group()
    lapse = max(WorkflowSlot.objects.filter(rule=RULE).values_list("lease_expires_at", flat=True))

    def holders_freed():
        slots = WorkflowSlot.objects.filter(rule=RULE)
        if slots.filter(step__run_id__in=holders).exists():
            return None
        held_by = {str(run_id) for run_id in slots.values_list("step__run_id", flat=True)}
        return database_now(), held_by, any(slot_holds(waiters))

    freed_at, held_by, still_waiting = wait_until(
        holders_freed, 3 * LEASE_SECONDS, "the killed holders' slots to free"
    )
    assert (freed_at - lapse).total_seconds() < LEASE_SECONDS
    print(f"slots free {(freed_at - killed_at).total_seconds():.2f} s after the kill (loaded)")
    # The transactions that freed them handed them to the waiting attempts (none waits on).
    assert held_by <= set(waiters)
    assert not still_waiting

    wait_until(
        lambda: (
            WorkflowRun.objects.filter(pk__in=holders + waiters, status=RunStatus.COMPLETED).count()
            == 4
        ),
        60,
        "every run to complete",
    )
    order = [(line["run_id"], line["attempt"]) for line in attempts(log)]
    assert sorted(order[2:]) == sorted(
        [(holder, 2) for holder in holders] + [(w, 1) for w in waiters]
    )
    assert not WorkflowSlot.objects.exists()
