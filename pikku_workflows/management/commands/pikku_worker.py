"""`manage.py pikku_worker`: a django-q2 cluster plus the pikku timer/recovery loop, registered
as a `WorkflowWorker` row its loop keeps fresh; `--reload` restarts it on code changes."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connections

from pikku_workflows.outages import outages


class Command(BaseCommand):
    help = (
        "Run a django-q2 cluster (orchestrator passes and queued steps) and, beside it, the "
        "loop that fires durable timers and runs recovery. Run as many as you like."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=None, help="worker processes")
        parser.add_argument("--cluster", default=None, help="django-q2 cluster (queue) name")
        parser.add_argument(
            "--reload",
            action="store_true",
            help="Restart the worker when a Python file it loaded changes (development).",
        )

    def handle(
        self,
        *args: Any,
        workers: int | None,
        cluster: str | None,
        reload: bool = False,
        **options: Any,
    ) -> None:
        if reload:
            from pikku_workflows.management.reloader import Supervisor, child_arguments

            sys.exit(Supervisor(child_arguments(), self.stdout).run())
        if cluster and os.environ.get("Q_CLUSTER_NAME") != cluster:
            # django-q2 reads Q_CLUSTER_NAME while Django sets up: start again with it set.
            os.execve(
                sys.executable,
                [sys.executable, *sys.argv],
                {**os.environ, "Q_CLUSTER_NAME": cluster},
            )
        from django_q.cluster import Cluster
        from django_q.conf import Conf

        from pikku_workflows.engine.operations.recovery import run_timer_loop
        from pikku_workflows.engine.operations.schedules import upsert_declared_schedules
        from pikku_workflows.worker_process import arrange_forked_children, steps_in_flight
        from pikku_workflows.worker_registration import WorkerRegistration, name_worker_processes

        if workers:
            Conf.WORKERS = workers
        name_worker_processes()  # before the cluster forks: its processes name this worker
        arrange_forked_children()
        stop = threading.Event()
        q_cluster = Cluster()
        # After Cluster(): its handlers would stop the cluster inside the signal handler.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        connections.close_all()
        q_cluster.start()
        self.stdout.write(f"pikku_worker: cluster {q_cluster.name} started (pid {os.getpid()})")
        registration = WorkerRegistration(Conf.CLUSTER_NAME, steps_in_flight)
        try:
            _quietly(registration.register)  # else the loop's first heartbeat registers it
            _quietly(upsert_declared_schedules)  # the schedules this deploy declares
            run_timer_loop(stop, on_tick=registration.beat)
        finally:
            stop_cluster(q_cluster)
            _quietly(registration.unregister)
            connections.close_all()
        self.stdout.write("pikku_worker: stopped")


def stop_cluster(q_cluster: Any) -> None:
    """Stop the cluster (it drains what its workers hold), unless its sentinel is already gone.

    `Cluster.stop()` wakes the sentinel through a multiprocessing Condition, whose notify waits
    for every sleeper to wake: a sentinel killed meanwhile (a SIGTERM to the whole process group
    kills it at once, django-q2 restores SIG_DFL there) never wakes, and stop() hangs forever.
    So stop from a thread and give up once the sentinel has ended; its children die with it.
    """
    from multiprocessing.connection import wait

    stopper = threading.Thread(target=q_cluster.stop, name="pikku-cluster-stop", daemon=True)
    stopper.start()
    while stopper.is_alive():
        stopper.join(0.2)
        if wait([q_cluster.sentinel.sentinel], timeout=0):
            stopper.join(1)  # a stop() that is not stuck returns at once now
            return


def _quietly(work: Any) -> None:
    """The worker row is for people to read: a database outage must not stop the worker."""
    try:
        work()
    except DatabaseError as exc:
        outages.failed("updating this worker's row", exc)
