"""Schedules firing at scale on PostgreSQL (prints, never asserts).

1. 1,000 schedules all due in the same second, 4 timer loops in separate processes (the loop
   `pikku_worker` runs, without its django-q2 cluster), one loop killed with SIGKILL once the
   firing is under way: duplicate and missing ticks and runs, the time until the last run was
   created, and the fire delay (a run's creation minus its nominal time) p50/p99/max.
2. 10,000 schedules, none due: the statements one tick of the loop issues, and EXPLAIN
   (ANALYZE, BUFFERS) of its claim query.

The database (`pikku_schedules_bench` by default) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
MODULE = "bench.schedule_workflows"
LOOPS = 4
DUE = 1_000
IDLE = 10_000
LEAD_SECONDS = 4  # the loops start and settle before the due second
WAIT_SECONDS = 60


def recreate_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(url: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="0",  # DEBUG keeps every query in memory: a cost no production loop pays
        PIKKU_EXTRA_WORKFLOW_MODULES=MODULE,
        PIKKU_LOG="WARNING",
    )
    import django

    django.setup()


def loop_process() -> None:
    """One timer loop until SIGTERM (the child side of the bench)."""
    setup_django(os.environ["DATABASE_URL"])
    from pikku_workflows.engine.operations.recovery import run_timer_loop

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    run_timer_loop(stop)


def start_loops(url: str) -> list[subprocess.Popen]:
    env = {**os.environ, "DATABASE_URL": url, "PIKKU_EXTRA_WORKFLOW_MODULES": MODULE}
    loops = [
        subprocess.Popen(
            [sys.executable, __file__, "--loop"], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(LOOPS)
    ]
    for loop in loops:
        assert loop.stdout is not None
        loop.stdout.readline()  # "ready"
    return loops


def database_now() -> object:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def burst(url: str, due: int) -> None:
    import pikku_workflows as pw
    from bench.schedule_workflows import WORKFLOW
    from pikku_workflows.models import WorkflowSchedule, WorkflowScheduleTick

    anchor = database_now().replace(microsecond=0) + timedelta(days=1)
    started = time.monotonic()
    for index in range(due):
        # Every hour from the anchor: due once during the bench, at the second set below.
        pw.create_schedule(
            f"burst-{index:04d}", WORKFLOW, every="1h", start_at=anchor, overlap="allow_all"
        )
    print(f"created {due} schedules in {time.monotonic() - started:.1f} s")
    loops = start_loops(url)
    print(f"{LOOPS} timer loops started (pids {', '.join(str(p.pid) for p in loops)})")
    due_at = database_now().replace(microsecond=0) + timedelta(seconds=LEAD_SECONDS)
    # Every schedule anchored at the due second: its next tick is that second.
    WorkflowSchedule.objects.update(start_at=due_at, next_nominal_at=due_at, next_fire_at=due_at)
    print(f"all {due} due at {due_at.isoformat()}")
    victim = loops[0]
    deadline = time.monotonic() + WAIT_SECONDS + LEAD_SECONDS
    killed_at = None
    while time.monotonic() < deadline:
        fired = WorkflowScheduleTick.objects.filter(nominal_at=due_at).count()
        if killed_at is None and fired >= due // 10:
            victim.send_signal(signal.SIGKILL)
            killed_at = fired
            print(f"SIGKILL to loop {victim.pid} with {fired} ticks committed")
        if fired >= due:
            break
        time.sleep(0.02)
    for loop in loops[1:]:
        loop.send_signal(signal.SIGTERM)
    for loop in loops:
        loop.wait(timeout=30)
    report_burst(due_at)


def report_burst(due_at: object) -> None:
    from django.db.models import Count, Max

    from pikku_workflows.models import WorkflowRun, WorkflowSchedule, WorkflowScheduleTick

    ticks = WorkflowScheduleTick.objects.filter(nominal_at=due_at)
    per_schedule = ticks.values("schedule_id").annotate(n=Count("id"))
    duplicate_ticks = sum(row["n"] - 1 for row in per_schedule if row["n"] > 1)
    missing_ticks = WorkflowSchedule.objects.count() - per_schedule.count()
    runs = WorkflowRun.objects.filter(scheduled_for=due_at)
    runs_per_schedule = runs.values("schedule_id").annotate(n=Count("id"))
    duplicate_runs = sum(row["n"] - 1 for row in runs_per_schedule if row["n"] > 1)
    missing_runs = WorkflowSchedule.objects.count() - runs_per_schedule.count()
    claims = sorted(
        (at - due_at).total_seconds() for at in ticks.values_list("fired_at", flat=True)
    )
    if claims:
        print(f"ticks claimed from {claims[0]:.2f} s to {claims[-1]:.2f} s after the due second")
    delays = sorted(
        (created - due_at).total_seconds() for created in runs.values_list("created_at", flat=True)
    )
    last = runs.aggregate(last=Max("created_at"))["last"]
    print(f"duplicate ticks: {duplicate_ticks}   missing ticks: {missing_ticks}")
    print(f"duplicate runs:  {duplicate_runs}   missing runs:  {missing_runs}")
    if delays:
        p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
        print(
            f"all {len(delays)} runs created {(last - due_at).total_seconds():.2f} s after the due second; "
            f"fire delay p50 {statistics.median(delays):.3f} s, p99 {p99:.3f} s, max {delays[-1]:.3f} s"
        )


def idle(url: str) -> None:
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from bench.schedule_workflows import WORKFLOW
    from pikku_workflows.engine.operations.schedule_firing import fire_due_schedules
    from pikku_workflows.engine.store.claims import lock_due_schedules_txn
    from pikku_workflows.models import WorkflowSchedule
    from pikku_workflows.registry import registry

    later = database_now() + timedelta(days=1)
    WorkflowSchedule.objects.all().delete()
    WorkflowSchedule.objects.bulk_create(
        WorkflowSchedule(
            name=f"idle-{index:05d}",
            workflow=WORKFLOW,
            every_ms=3_600_000,
            next_nominal_at=later + timedelta(seconds=index),
            next_fire_at=later + timedelta(seconds=index),
        )
        for index in range(IDLE)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    with CaptureQueriesContext(connection) as queries:
        fired = fire_due_schedules()
    print(
        f"\n{IDLE} schedules, none due: one loop tick fired {fired} and issued {len(queries)} statement(s):"
    )
    for query in queries.captured_queries:
        print(f"  {query['sql'][:160]}…")
    with transaction.atomic(), CaptureQueriesContext(connection) as claim:
        lock_due_schedules_txn(20, list(registry.workflows))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim.captured_queries[-1]["sql"])
        print("EXPLAIN (ANALYZE, BUFFERS) of the claim:")
        for (line,) in cursor.fetchall():
            print(f"  {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database", default="postgres://postgres@127.0.0.1:5432/pikku_schedules_bench"
    )
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--due", type=int, default=DUE, help="schedules due in the same second")
    parser.add_argument("--skip-idle", action="store_true", help="skip the 10,000 idle schedules")
    args = parser.parse_args()
    if args.loop:
        loop_process()
        return
    print(
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
    )
    recreate_database(args.database)
    setup_django(args.database)
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    burst(args.database, args.due)
    if not args.skip_idle:
        idle(args.database)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
