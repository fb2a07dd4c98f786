"""A fan-out graph on a real worker, SIGKILLed while both branches run: a new worker re-runs
each branch (attempt 2) and the join fires once, on the graph's rows alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus, StepStatus
from tests.conftest import wait_until
from tests.e2e.conftest import alive, descendants

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def attempts_logged(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_worker__sigkill_mid_fan_out_re_runs_each_branch_and_joins_once(start_worker, tmp_path):
    log = tmp_path / "attempts.jsonl"
    first = start_worker()
    run_id = pw.start_workflow("e2e.fan_out", {"log": str(log), "seconds": 60})

    # Both branches were dispatched in one pass and run at once on the two workers.
    started = wait_until(lambda: len(attempts_logged(log)) == 2, 20, "both branches to start")
    assert started
    assert sorted(entry["step_key"] for entry in attempts_logged(log)) == ["left", "right"]
    statuses = dict(WorkflowStep.objects.filter(run_id=run_id).values_list("step_key", "status"))
    assert statuses == {
        "start": StepStatus.SUCCEEDED,
        "left": StepStatus.RUNNING,
        "right": StepStatus.RUNNING,
    }
    tree = descendants(first.pid)

    first.kill_main()
    wait_until(lambda: not alive(tree), 5, f"the worker's children {alive(tree)} to die")

    start_worker()
    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        40,
        "the new worker to finish the graph",
    )

    assert (run.status, run.error) == (RunStatus.COMPLETED, None)
    assert run.output == {"join": {"left": {"attempt": 2}, "right": {"attempt": 2}}}
    for branch in ("left", "right"):
        history = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key=branch)
        assert list(history.order_by("attempt").values_list("attempt", "status")) == [
            (1, StepStatus.RUNNING),  # the killed attempt never recorded an outcome
            (2, StepStatus.SUCCEEDED),
        ]
    join = WorkflowStepHistory.objects.filter(step__run_id=run_id, step__step_key="join")
    assert list(join.values_list("attempt", "status")) == [(1, StepStatus.SUCCEEDED)]
    assert sorted((e["step_key"], e["attempt"]) for e in attempts_logged(log)) == [
        ("left", 1),
        ("left", 2),
        ("right", 1),
        ("right", 2),
    ]
