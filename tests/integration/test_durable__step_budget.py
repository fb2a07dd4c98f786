"""The per-step cost of a queued step, pinned: claim, run, record and the in-place orchestrator
pass that dispatches the next step, in a fixed number of round trips (bench/queued.py).

The run lease is taken by the write that records the result and released by the write that
dispatches the next step, so the pass neither reads the run nor leases it separately."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.queue import drain_queue, queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _queued(through_the_queue: None) -> None:
    """These tests are about the queue path: no step runs in place."""


EXECUTE_STEP = "pikku_workflows.tasks.execute_step"
ORCHESTRATE = "pikku_workflows.tasks.orchestrate"

# One queued step, as a worker runs it (every statement is one round trip and its own commit;
# django-q2's dequeue, its acknowledgement and its per-task connection check come on top):
STEP_BUDGET = [
    "WITH guard",  # claim: run still running (FOR SHARE), step -> running, history, started_by
    "WITH moved",  # record the result with its history row (fenced by attempt), take the lease
    "SELECT",  # the in-place pass: every step of the run, one query
    "WITH lease",  # the next step (scheduled) + history + its queue message, lease released
]


@pytest.fixture
def chain() -> None:
    @pw.step_function("budget.add", inline=False)
    def add(data: dict, ctx: pw.StepContext) -> int:
        return data["i"] + 1

    @pw.workflow("budget.chain")
    def run_chain(wf: pw.Workflow, input: dict) -> int:
        total = 0
        for i in range(input["k"]):
            total += wf.do(f"s{i}", "budget.add", {"i": i})
        return total


def test_queued_step__claim_record_and_in_place_pass_fit_the_budget(chain):
    run_id = pw.start_workflow("budget.chain", {"k": 3})
    tasks.orchestrate(run_id)  # the start message: dispatches s0
    tasks.execute_step(run_id, "s0")  # warm: statement caches, first-use imports

    with CaptureQueriesContext(connection) as captured:
        tasks.execute_step(run_id, "s1")

    statements = [" ".join(query["sql"].split()) for query in captured.captured_queries]
    assert len(statements) == len(STEP_BUDGET), "\n".join(statements)
    for statement, expected in zip(statements, STEP_BUDGET, strict=True):
        assert statement.startswith(expected), "\n".join(statements)
    assert "FOR SHARE" in statements[0]
    assert 'UPDATE "pikku_workflows_workflowrun"' in statements[1]
    assert 'INSERT INTO "django_q_ormq"' in statements[3]
    step = WorkflowStep.objects.get(run_id=run_id, step_key="s2")
    assert step.status == StepStatus.SCHEDULED
    # One queue hop per step: after the start message, only step messages (s0, s1, s2).
    assert [task for task, _ in queued_tasks()] == [ORCHESTRATE] + [EXECUTE_STEP] * 3

    drain_queue()
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, 6)
