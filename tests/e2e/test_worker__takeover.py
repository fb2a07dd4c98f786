"""A worker process frozen mid-step (SIGSTOP: a stalled VM, a debugger, swap) while its sibling
runs a long in-place pass: recovery takes the frozen step over within one lease of its lapse,
without waiting for the busy pass's in-place budget (docs/architecture.md §8)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowStep, WorkflowStepHistory
from tests.conftest import wait_until
from tests.e2e.conftest import WORKER_SETTINGS

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

LEASE_SECONDS = float(WORKER_SETTINGS["PIKKU_STEP_LEASE_SECONDS"])


def attempts(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_worker__a_frozen_step_is_taken_over_within_one_lease_beside_a_busy_pass(
    start_worker, tmp_path
):
    # The budget that let one pass hold its process for minutes when this was measured.
    start_worker(PIKKU_IN_PLACE_MAX_SECONDS="120", PIKKU_IN_PLACE_MAX_STEPS="100000")
    frozen_log, busy_log = tmp_path / "frozen.jsonl", tmp_path / "busy.jsonl"
    frozen_run = pw.start_workflow("e2e.ticks", {"log": str(frozen_log), "seconds": 60, "steps": 1})
    [first] = wait_until(lambda: attempts(frozen_log), 60, "the step to start in place")
    busy = {"log": str(busy_log), "seconds": 0.1, "steps": 400}
    busy_runs = [pw.start_workflow("e2e.ticks", busy) for _ in range(2)]
    wait_until(lambda: attempts(busy_log), 60, "the other process to be busy in place")

    os.kill(first["pid"], signal.SIGSTOP)
    wait_until(lambda: lapsed_at(frozen_run), 2 * LEASE_SECONDS, "the frozen step's lease to lapse")
    step = WorkflowStep.objects.get(run_id=frozen_run, step_key="t0")
    lapsed = step.lease_expires_at

    taken = wait_until(
        lambda: WorkflowStepHistory.objects.filter(step=step, attempt=2).first(),
        20,
        "recovery to take the frozen step over",
    )

    assert (taken.created_at - lapsed).total_seconds() < LEASE_SECONDS
    # The claim's history row commits before the step's body starts and logs its attempt.
    [second] = wait_until(
        lambda: [a for a in attempts(frozen_log) if a["attempt"] == 2], 60, "attempt 2 to start"
    )
    assert second["pid"] != first["pid"]
    assert {a["run_id"] for a in attempts(busy_log)} <= set(busy_runs)


def lapsed_at(run_id: str) -> bool:
    from tests.faults import database_now

    step = WorkflowStep.objects.get(run_id=run_id, step_key="t0")
    return step.lease_expires_at is not None and step.lease_expires_at < database_now()
