"""Workers that say what they do: each `pikku_worker` registers a `WorkflowWorker` row (host,
pid, cluster, heartbeat, steps in flight) that its timer loop refreshes and a clean stop removes;
`--reload` restarts the worker when a file it loaded changes, so edited code is what runs."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

import pytest

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowWorker
from pikku_workflows.status import RunStatus
from pikku_workflows.worker_registration import timer_loop_seen
from tests.conftest import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

PROBE = """
import pikku_workflows as pw

@pw.step_function("reload.version", inline=False)
def version(data, ctx):
    return "{version}"

@pw.workflow("reload.probe")
def probe(wf, input):
    return wf.do("version", "reload.version")
"""


def completed_output(run_id: str) -> object:
    run = WorkflowRun.objects.get(pk=run_id)
    return run.output if run.status == RunStatus.COMPLETED else None


def test_worker__registers_itself_counts_steps_in_flight_and_leaves_on_stop(start_worker):
    assert not timer_loop_seen()
    worker = start_worker()

    row = wait_until(lambda: WorkflowWorker.objects.filter(pid=worker.pid).first(), 10, "the row")
    assert (row.host, row.cluster) == (socket.gethostname(), "pikku")
    assert timer_loop_seen()

    run_id = pw.start_workflow("e2e.count", {"start": 0, "steps": 1, "seconds": 3})
    wait_until(
        lambda: WorkflowWorker.objects.filter(pid=worker.pid, steps_in_flight=1).exists(),
        10,
        "one step in flight",
    )
    wait_until(lambda: completed_output(run_id), 60, "the run to complete")
    wait_until(
        lambda: WorkflowWorker.objects.filter(pid=worker.pid, steps_in_flight=0).exists(),
        5,
        "no step in flight",
    )
    seen = WorkflowWorker.objects.get(pid=worker.pid).last_seen_at
    assert seen > row.last_seen_at  # the heartbeat moved on

    worker.stop()
    assert not WorkflowWorker.objects.filter(pid=worker.pid).exists()


def test_worker__reload_restarts_the_worker_when_its_code_changes(start_worker, tmp_path):
    probe = tmp_path / "reload_probe.py"
    probe.write_text(PROBE.format(version="v1"))
    sys.path.insert(0, str(tmp_path))
    try:
        import reload_probe  # noqa: F401 - the test process starts runs of it too

        worker = start_worker(
            args=("--reload",),
            PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
            PIKKU_EXTRA_WORKFLOW_MODULES="tests.e2e.workflows,reload_probe",
        )
        first = pw.start_workflow("reload.probe")
        assert wait_until(lambda: completed_output(first), 60, "the first run") == "v1"

        probe.write_text(PROBE.format(version="v2"))
        later = time.time() + 2  # a newer mtime whatever the file system's resolution
        os.utime(probe, (later, later))
        wait_until(lambda: "restarting the worker" in worker.log(), 10, "the restart")
        wait_until(lambda: worker.log().count("pikku_worker: cluster") == 2, 20, "the new worker")

        second = pw.start_workflow("reload.probe")
        assert wait_until(lambda: completed_output(second), 60, "the second run") == "v2"

        # Killed outright (kill -9 of the pid the Workers page shows): it comes back by itself.
        child = wait_until(lambda: WorkflowWorker.objects.first(), 10, "the worker's row")
        os.kill(child.pid, signal.SIGKILL)
        wait_until(lambda: "the worker was killed (signal 9)" in worker.log(), 10, "the news")
        wait_until(lambda: worker.log().count("pikku_worker: cluster") == 3, 20, "a new worker")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("reload_probe", None)
    worker.stop()
    assert "pikku_worker: stopped" in worker.log()
    # The stopped one removed its row; the killed one's stays, to go stale on the Workers page.
    assert list(WorkflowWorker.objects.values_list("pid", flat=True)) == [child.pid]
