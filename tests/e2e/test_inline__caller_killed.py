"""An inline caller killed while it sleeps in-process (a short `wf.sleep`) leaves a durable timer
behind, not a step nobody will ever look at: the timer loop fires it and the run completes"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.test import override_settings

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the caller runs
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.e2e.conftest import REPO_ROOT, worker_database_url
from tests.queue import drain_queue

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

CALLER = (
    "import pikku_workflows as pw; pw.start_workflow('e2e.nap', {'duration': '2s'}, inline=True)"
)


def completed_after_recovery(run_id: str) -> bool:
    with override_settings(PIKKU_WORKFLOWS={"REDISPATCH_BACKOFF_SECONDS": 0.2}):
        pw.recover()
    drain_queue()
    return WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


def test_inline_sleep__a_caller_killed_mid_sleep_leaves_a_timer_that_fires(fresh_backoff):
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PIKKU_EXTRA_WORKFLOW_MODULES": "tests.e2e.workflows",
        "PIKKU_RUN_LEASE_SECONDS": "1",
    }
    caller = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", CALLER], cwd=REPO_ROOT, env=env
    )
    try:
        sleeping = wait_until(
            lambda: WorkflowStep.objects.filter(run__workflow="e2e.nap", step_key="nap").first(),
            30,
            "the inline caller to start its sleep",
        )
    finally:
        caller.kill()
        caller.wait(10)

    wait_until(lambda: completed_after_recovery(sleeping.run_id), 20, "the run to complete")
