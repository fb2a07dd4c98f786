"""A named limit's `max_running` raced by worker threads with their own connections: 25 step
attempts with max_running=2 never have a third executing, as the steps record their overlap
and as a sampler reading the slot table from another connection sees it."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowSlot, WorkflowSlotCount
from pikku_workflows.status import RunStatus
from pikku_workflows.tasks import orchestrate
from tests.concurrency.harness import JOIN_TIMEOUT
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ATTEMPTS = 25
WORKERS = 6


class Overlap:
    """How many attempts execute at once, as the attempts themselves count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def _all_ended() -> bool:
    runs = WorkflowRun.objects.filter(workflow="slots.race")
    return not runs.exclude(status=RunStatus.COMPLETED).exists()


def _in_threads(target, count: int) -> list[threading.Thread]:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_max_running__25_concurrent_attempts_with_max_running_2_never_run_a_third(settings):
    settings.PIKKU_WORKFLOWS = {**settings.PIKKU_WORKFLOWS, "IN_PLACE": False}
    pw.define_limit("slots.vendor", max_running=2)
    overlap = Overlap()

    @pw.step_function("slots.call", inline=False, limits=["slots.vendor"])
    def call(data, ctx):
        overlap.enter()
        try:
            time.sleep(0.03)
        finally:
            overlap.leave()
        return data

    @pw.workflow("slots.race")
    def race(wf, input):
        return wf.do("call", "slots.call", input)

    runs = [pw.start_workflow("slots.race", {"n": n}) for n in range(ATTEMPTS)]
    for run_id in runs:
        orchestrate(run_id)  # each step dispatched: 25 messages for the workers
    done = threading.Event()
    sampled: list[int] = []

    def sample() -> None:
        while not done.is_set():
            sampled.append(WorkflowSlot.objects.filter(rule="limit:slots.vendor").count())
            time.sleep(0.002)

    def work() -> None:
        while not done.is_set():
            drain_queue()
            if _all_ended():
                done.set()
            time.sleep(0.005)

    threads = _in_threads(sample, 1) + _in_threads(work, WORKERS)
    done.wait(JOIN_TIMEOUT * 2)
    done.set()
    for thread in threads:
        thread.join(timeout=JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a worker hung (deadlock?)"

    assert _all_ended()
    assert overlap.most <= 2, overlap.most
    assert max(sampled) <= 2, max(sampled)
    assert not WorkflowSlot.objects.exists()
    assert WorkflowSlotCount.objects.get(rule="limit:slots.vendor").held == 0
    print(
        f"most at once: {overlap.most} (attempts), {max(sampled)} (slot rows, {len(sampled)} samples)"
    )
