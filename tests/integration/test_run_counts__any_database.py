"""The stored run counts (models/run_counts.py) follow every way a run comes, moves and goes, on
either database: starts (a parent and its child), a failure, a retry, a cancel, a purge, a bulk
update and a delete outside the engine, and a parent cleared from its child; before and after the
recovery pass folds them."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.recovery import recover
from pikku_workflows.engine.store.run_counts import fold_run_count_changes
from pikku_workflows.models import WorkflowRun, WorkflowRunCount, WorkflowRunCountChange
from pikku_workflows.models.run_counts import current_run_counts
from tests.retention import age, ended_order
from tests.run_counts import counted_from_the_runs, register_counting_shop

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def shop() -> None:
    register_counting_shop()


def folded_counts() -> dict[tuple[str, str, bool], int]:
    rows = WorkflowRunCount.objects.exclude(runs=0)
    return {(row.workflow, row.status, row.top_level): row.runs for row in rows}


def test_run_counts__follow_starts_moves_and_deletes_folded_or_not():
    kept, purged = ended_order(1), ended_order(2)
    broken = pw.start_workflow("retention.broken", {}, inline=True)
    napping = [pw.start_workflow("counts.napping", {}, inline=True) for _ in range(3)]
    assert current_run_counts() == counted_from_the_runs()

    fold_run_count_changes()
    assert not WorkflowRunCountChange.objects.exists()
    assert folded_counts() == counted_from_the_runs() == current_run_counts()

    pw.retry_run(broken)
    pw.cancel_run(napping[0])
    age(purged, days=40)
    pw.purge_runs(older_than="30d")
    assert not WorkflowRun.objects.filter(pk=purged).exists()
    WorkflowRun.objects.filter(pk=napping[1]).update(status="suspended")
    WorkflowRun.objects.filter(pk=napping[2]).delete()
    child = WorkflowRun.objects.get(parent_run=kept)
    WorkflowRun.objects.filter(pk=child.pk).update(parent_run=None)
    truth = counted_from_the_runs()
    assert ("retention.invoice", "completed", True) in truth  # the child is top-level now
    assert current_run_counts() == truth

    fold_run_count_changes()
    assert folded_counts() == truth == current_run_counts()


def test_run_counts__each_recovery_pass_folds_them():
    ended_order(1)

    recover()  # the timer loop's every RECOVERY_INTERVAL_SECONDS, and `pikku_recover`

    assert not WorkflowRunCountChange.objects.exists()
    assert folded_counts() == counted_from_the_runs()
