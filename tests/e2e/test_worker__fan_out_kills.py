"""SIGKILL of the whole worker group, repeated, while a 200-way wf.map of atomic queued steps and
50 runs of one atomic queued step are in flight: every member's result is recorded once, by the
attempt that claimed it, the map's run is woken once, and every step's order row exists exactly
once (the killed attempts' rows never committed). And a kill between two compensations: the
first is not run again, the second's write lands once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from project.demo.models import Order
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

ITEMS = 200
RUNS = 50
KILLS = 2


def attempts_logged(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]


def settled(run_ids: list[str]) -> bool:
    return not WorkflowRun.objects.filter(pk__in=run_ids, status=RunStatus.RUNNING).exists()


def orders_by_marker() -> dict[str, int]:
    counts: dict[str, int] = {}
    for marker in Order.objects.values_list("customer", flat=True):
        counts[marker] = counts.get(marker, 0) + 1
    return counts


def test_kill_9_during_a_200_way_map_and_atomic_steps_records_each_once(start_worker, tmp_path):
    log, passes = tmp_path / "attempts.jsonl", tmp_path / "passes"
    passes.touch()
    worker = start_worker()
    map_id = pw.start_workflow(
        "e2e.map", {"n": ITEMS, "log": str(log), "passes": str(passes), "seconds": 0.02}
    )
    runs = [
        pw.start_workflow("e2e.reserved", {"log": str(log), "seconds": 0.1}) for _ in range(RUNS)
    ]

    for kill in range(1, KILLS + 1):
        # Somewhere in the middle of the work, mid-step: both processes are inside a step
        # (its order row written, not committed) nearly all of the time.
        progress = (ITEMS + RUNS) * kill // (KILLS + 2)
        wait_until(lambda p=progress: len(attempts_logged(log)) >= p, 120, f"{progress} attempts")
        worker.kill_group()
        worker = start_worker()

    wait_until(lambda: settled([map_id, *runs]), 180, "every run to end")

    run = WorkflowRun.objects.get(pk=map_id)
    assert (run.status, run.error) == (RunStatus.COMPLETED, None)
    assert passes.read_text().splitlines() == ["pass", "pass"]  # started, then woken once
    members = WorkflowStep.objects.filter(run_id=map_id).order_by("created_at")
    assert [step.step_key for step in members] == [f"item[{i}]" for i in range(ITEMS)]
    assert [result["attempt"] for result in run.output] == [step.attempt for step in members]
    for step in [*members, *WorkflowStep.objects.filter(run_id__in=runs)]:
        # Recorded once, by the attempt that claimed it last; no earlier attempt has a result.
        history = list(WorkflowStepHistory.objects.filter(step=step).order_by("attempt"))
        assert [h.status for h in history][-1] == StepStatus.SUCCEEDED, step
        assert [h.result for h in history[:-1]] == [None] * (len(history) - 1), step
        assert step.result == {"attempt": step.attempt}
    assert WorkflowRun.objects.filter(pk__in=runs, status=RunStatus.COMPLETED).count() == RUNS

    # The kills landed mid-step: attempts that ran and were killed before they committed.
    killed = WorkflowStep.objects.filter(run_id__in=[map_id, *runs], attempt__gt=1).count()
    assert killed >= 1, "no kill landed inside a step"
    markers = [f"{map_id}:item[{i}]" for i in range(ITEMS)]
    markers += [f"{run_id}:reserve" for run_id in runs]
    orders = orders_by_marker()
    assert {marker: orders.get(marker, 0) for marker in markers} == dict.fromkeys(markers, 1)


def test_kill_9_between_two_compensations_runs_each_once(start_worker, tmp_path):
    log = tmp_path / "undos.jsonl"
    worker = start_worker()
    run_id = pw.start_workflow("e2e.undone", {"log": str(log), "seconds": 60})

    # The hotel was undone (recorded); the flight's undo is running, slowly.
    wait_until(
        lambda: (
            [entry["step_key"] for entry in attempts_logged(log)]
            == ["hotel:compensate", "flight:compensate"]
        ),
        30,
        "the second undo to start",
    )
    hotel = WorkflowStep.objects.get(run_id=run_id, step_key="hotel:compensate")
    assert hotel.status == StepStatus.SUCCEEDED
    worker.kill_group()
    start_worker()

    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        40,
        "the run to end",
    )
    assert (run.status, run.compensation) == (RunStatus.FAILED, "compensated")
    assert "the trip fell through" in run.error["message"]
    assert [(e["step_key"], e["attempt"]) for e in attempts_logged(log)] == [
        ("hotel:compensate", 1),
        ("flight:compensate", 1),  # killed
        ("flight:compensate", 2),
    ]
    orders = orders_by_marker()
    assert orders.get(f"{run_id}:hotel:compensate") == 1
    assert orders.get(f"{run_id}:flight:compensate") == 1
