"""The lock order of claims.sql: a worker recording its step's outcome holds the step row and
never waits for the run row (a claim may hold it, waiting for that very step row: a deadlock).
It takes the run lease with the outcome only when the run row is free right now; otherwise the
outcome commits alone and the pass takes the lease after."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows import tasks
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.concurrency.harness import JOIN_TIMEOUT
from tests.conftest import wait_until
from tests.faults import HeldRowLock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SHARE_THE_RUN = f"SELECT id FROM {WorkflowRun._meta.db_table} WHERE id = %s FOR SHARE"


@pytest.fixture
def queued_step(through_the_queue: None) -> str:
    @pw.step_function("order.pack", inline=False)
    def pack(data: Any, ctx: pw.StepContext) -> str:
        return "packed"

    @pw.workflow("order.packing")
    def packing(wf: pw.Workflow, input: Any) -> str:
        return wf.do("pack", "order.pack", {})

    run_id = pw.start_workflow("order.packing", {})
    tasks.orchestrate(run_id)  # dispatched: the step waits for its worker
    return run_id


def test_record_outcome__commits_while_a_claim_shares_the_run_row(queued_step):
    run_id = queued_step
    assert WorkflowStep.objects.get(run_id=run_id).status == StepStatus.SCHEDULED
    errors: list[BaseException] = []

    def work() -> None:
        try:
            tasks.execute_step(run_id, "pack")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with HeldRowLock(SHARE_THE_RUN, [run_id]) as claim_in_flight:
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        # The outcome is committed although the run row is held: the record did not wait.
        wait_until(
            lambda: (
                WorkflowStep.objects.get(run_id=run_id, step_key="pack").status
                == StepStatus.SUCCEEDED
            ),
            10,
            "the outcome to commit",
        )
        claim_in_flight.release()
    worker.join(JOIN_TIMEOUT)

    assert errors == []
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
