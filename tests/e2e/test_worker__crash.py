"""SIGKILL of a worker's main process during slow queued steps (a workflow's, and a fan-out
graph's two branches): none of its processes survive (an orphan would keep renewing the lease),
the worker looks dead (not seen after 3 missed heartbeats), and a new worker finishes the run
with attempt 2 (the killed attempt ends "lease lapsed", naming its worker; the takeover is
logged) and re-runs each branch, the join firing once;
SIGTERM to the worker's process group hands the running step's lease back."""

from __future__ import annotations

import json
import os
import signal
import socket
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import pikku_workflows as pw
import tests.e2e.workflows  # noqa: F401 - registers the workflows the worker runs
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory, WorkflowWorker
from pikku_workflows.status import RunStatus, StepStatus
from pikku_workflows.worker_process import HANDOVER_SECONDS, RELEASE_SECONDS
from pikku_workflows.worker_registration import with_silence
from tests.conftest import wait_until
from tests.e2e.conftest import WORKER_SETTINGS, alive, descendants

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


def silent_workers() -> list[str]:
    silent = with_silence(WorkflowWorker.objects.all()).filter(silent=True)
    return [f"{host}:{pid}" for host, pid in silent.values_list("host", "pid")]


def ended(run_id: str) -> WorkflowRun | None:
    return WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first()


def test_worker__sigkill_mid_step_leaves_no_orphans_and_a_new_worker_finishes(
    start_worker, tmp_path, monkeypatch
):
    # This process judges the workers' heartbeats at the workers' own cadence.
    monkeypatch.setenv(
        "PIKKU_WORKER_HEARTBEAT_SECONDS", WORKER_SETTINGS["PIKKU_WORKER_HEARTBEAT_SECONDS"]
    )
    # One kill, two runs in flight: a workflow's slow step, and a fan-out graph's two slow
    # branches, all three running at once on the worker's three processes.
    log, graph_log = tmp_path / "attempts.jsonl", tmp_path / "graph-attempts.jsonl"
    first = start_worker(("--workers", "3"))
    run_id = pw.start_workflow("e2e.crash", {"log": str(log), "seconds": 60})
    graph_id = pw.start_workflow("e2e.fan_out", {"log": str(graph_log), "seconds": 60})
    [attempt_1] = wait_until(lambda: attempts_logged(log), 60, "the slow step to start")
    assert attempt_1["attempt"] == 1
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    # Both branches were dispatched in one pass and run at once on two of the processes.
    started = wait_until(lambda: len(attempts_logged(graph_log)) == 2, 20, "both branches")
    assert started
    assert sorted(entry["step_key"] for entry in attempts_logged(graph_log)) == ["left", "right"]
    statuses = dict(WorkflowStep.objects.filter(run_id=graph_id).values_list("step_key", "status"))
    assert statuses == {
        "start": StepStatus.SUCCEEDED,
        "left": StepStatus.RUNNING,
        "right": StepStatus.RUNNING,
    }
    tree = descendants(first.pid)  # sentinel, pusher, monitor, the three workers
    assert attempt_1["pid"] in tree, (attempt_1, tree)
    assert {entry["pid"] for entry in attempts_logged(graph_log)} <= set(tree), tree
    assert len(tree) >= 3

    first.kill_main()

    # Every forked process dies with its parent; an orphan would renew the step's lease forever.
    wait_until(lambda: not alive(tree), 5, f"the worker's children {alive(tree)} to die")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)  # nobody recorded anything

    # The killed worker looks dead: its row is "not seen" once 3 heartbeats (0.3 s) are missed.
    killed = f"{socket.gethostname()}:{first.pid}"
    wait_until(lambda: silent_workers() == [killed], 5, "the killed worker to look silent")
    second = start_worker(("--workers", "3"))
    run = wait_until(lambda: ended(run_id), 40, "the new worker to finish the run")
    graph = wait_until(lambda: ended(graph_id), 40, "the new worker to finish the graph")

    assert (run.status, run.output, run.error) == (RunStatus.COMPLETED, {"attempt": 2}, None)
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt, step.result) == (StepStatus.SUCCEEDED, 2, {"attempt": 2})
    history = WorkflowStepHistory.objects.filter(step=step).order_by("attempt")
    assert list(history.values_list("attempt", "status", "result")) == [
        (1, StepStatus.FAILED, None),  # the killed attempt: ended where its lease lapsed
        (2, StepStatus.SUCCEEDED, {"attempt": 2}),
    ]
    assert [entry["attempt"] for entry in attempts_logged(log)] == [1, 2]
    assert attempts_logged(log)[1]["pid"] not in tree
    # The killed attempt ended "lease lapsed", naming its worker; one log line for the takeover.
    lapsed, taken_over = history.values_list("worker", "error")
    assert (lapsed[0], lapsed[1]["code"]) == (killed, "STEP_LEASE_EXPIRED")
    assert taken_over[0] == f"{socket.gethostname()}:{second.pid}"
    assert (
        f"run {run_id} step slow: attempt 1's lease lapsed (worker {killed} went silent); "
        "attempt 2 takes over" in second.log()
    )

    # The graph re-ran each branch (attempt 2) and its join fired once, on its rows alone.
    assert (graph.status, graph.error) == (RunStatus.COMPLETED, None)
    assert graph.output == {"join": {"left": {"attempt": 2}, "right": {"attempt": 2}}}
    for branch in ("left", "right"):
        history = WorkflowStepHistory.objects.filter(step__run_id=graph_id, step__step_key=branch)
        assert list(history.order_by("attempt").values_list("attempt", "status")) == [
            (1, StepStatus.FAILED),  # the killed attempt: ended where its lease lapsed
            (2, StepStatus.SUCCEEDED),
        ]
    join = WorkflowStepHistory.objects.filter(step__run_id=graph_id, step__step_key="join")
    assert list(join.values_list("attempt", "status")) == [(1, StepStatus.SUCCEEDED)]
    assert sorted((e["step_key"], e["attempt"]) for e in attempts_logged(graph_log)) == [
        ("left", 1),
        ("left", 2),
        ("right", 1),
        ("right", 2),
    ]


def test_worker__sigterm_to_its_process_group_releases_the_step_lease(start_worker, tmp_path):
    # A deploy (systemd stops the whole control group): the worker running the step hands its
    # lease back instead of leaving it to lapse, so the next worker re-claims it at once.
    log = tmp_path / "attempts.jsonl"
    worker = start_worker(PIKKU_STEP_LEASE_SECONDS="60")
    run_id = pw.start_workflow("e2e.crash", {"log": str(log), "seconds": 60})
    wait_until(lambda: attempts_logged(log), 60, "the slow step to start")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    assert step.lease_expires_at > timezone.now() + timedelta(seconds=30)
    tree = descendants(worker.pid)

    os.killpg(worker.pid, signal.SIGTERM)
    signalled = timezone.now()

    # It lets the step running in place go on for HANDOVER_SECONDS (this one never ends in
    # time), then hands the lease back within RELEASE_SECONDS; the rest is slack for a busy box.
    worker.process.wait(HANDOVER_SECONDS + RELEASE_SECONDS + 30)
    wait_until(lambda: not alive(tree), 5, f"the worker's children {alive(tree)} to exit")
    step = WorkflowStep.objects.get(run_id=run_id, step_key="slow")
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 1)
    assert step.lease_expires_at <= timezone.now()
    assert step.lease_expires_at >= signalled - timedelta(seconds=1)

    # The next worker re-claims it at once, well before the 60 s lease would have lapsed.
    start_worker(PIKKU_STEP_LEASE_SECONDS="60")
    run = wait_until(
        lambda: WorkflowRun.objects.exclude(status=RunStatus.RUNNING).filter(pk=run_id).first(),
        20,
        "the next worker to finish the run",
    )
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"attempt": 2})
    assert [entry["attempt"] for entry in attempts_logged(log)] == [1, 2]
