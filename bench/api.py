"""The HTTP API's overhead on PostgreSQL: the run list (a page of 50) and the detail of a 100-step
run, with 10,000 runs in the table, through the API (Django's full request stack: middleware,
session authentication, DRF, permissions, visibility, JSON rendering) and as the same reads
issued directly through the ORM (prints, never asserts).

For each: requests/s and p50/p95 latency of both, and the ratio (ORM req/s ÷ API req/s, the
API's cost per request as a multiple of the bare reads), plus the SQL statements of one request.
Requests go through Django's test client in this process: no sockets, so the figures are the
server's own work. The database (`pikku_api_bench` by default) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
RUNS = 10_000
STEPS_PER_RUN = 5  # every run of the table has a few steps, each with one history row
BIG_RUN_STEPS = 100
PAGE = 50
WORKFLOW = "bench.api_order"
STATUSES = ("completed", "failed", "running", "suspended", "cancelled")


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
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    # DEBUG would log every query in memory: a cost no production process pays.
    os.environ["DJANGO_DEBUG"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)

    import pikku_workflows as pw

    @pw.workflow(WORKFLOW, planned_steps=[f"s{i}" for i in range(STEPS_PER_RUN)])
    def order(wf: Any, input: dict) -> dict:  # registered for the definition; never run here
        return {}


def fill_table() -> str:
    """RUNS runs of a few steps each (bulk inserts, not the engine: the bench measures reads),
    one of them with BIG_RUN_STEPS steps; returns that run's id."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory

    owner = get_user_model().objects.create_superuser("bench", password="bench")
    now = timezone.now()
    runs = [
        WorkflowRun(
            workflow=WORKFLOW,
            status=STATUSES[index % len(STATUSES)],
            input={"order": index, "items": ["lamp", "desk"]},
            output={"shipped": index} if index % len(STATUSES) == 0 else None,
            started_by=owner,
            planned_steps=[f"s{i}" for i in range(STEPS_PER_RUN)],
        )
        for index in range(RUNS)
    ]
    WorkflowRun.objects.bulk_create(runs, batch_size=2000)
    for age, run in enumerate(runs):
        run.created_at = now - timedelta(seconds=age)
    WorkflowRun.objects.bulk_update(runs, ["created_at"], batch_size=2000)
    big = runs[0]
    steps: list[WorkflowStep] = []
    for run in runs:
        count = BIG_RUN_STEPS if run is big else STEPS_PER_RUN
        steps += [
            WorkflowStep(
                run=run,
                step_key=f"s{i}",
                function_name="bench.step",
                status="succeeded",
                result={"i": i},
                attempt=1,
            )
            for i in range(count)
        ]
    WorkflowStep.objects.bulk_create(steps, batch_size=5000)
    history = [
        WorkflowStepHistory(
            step=step,
            attempt=1,
            status="succeeded",
            result=step.result,
            created_at=now,
            running_at=now,
            succeeded_at=now + timedelta(milliseconds=3),
        )
        for step in steps
    ]
    WorkflowStepHistory.objects.bulk_create(history, batch_size=5000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return str(big.pk)


def measure(call: Callable[[], Any], rounds: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        call()
    latencies = []
    started = time.perf_counter()
    for _ in range(rounds):
        begin = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - begin)
    total = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": rounds / total,
        "p50": statistics.median(latencies) * 1000,
        "p95": latencies[int(len(latencies) * 0.95) - 1] * 1000,
    }


def queries_of(call: Callable[[], Any]) -> list[str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        call()
    return [query["sql"] for query in captured.captured_queries]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pikku_api_bench"
        ),
    )
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()

    recreate_database(args.database_url)
    setup_django(args.database_url)
    started = time.perf_counter()
    big_run = fill_table()
    print(
        f"table: {RUNS} runs x {STEPS_PER_RUN} steps, one run of {BIG_RUN_STEPS} steps "
        f"({time.perf_counter() - started:.1f} s to fill)"
    )

    from django.contrib.auth import get_user_model
    from django.test import Client

    import pikku_workflows as pw
    from pikku_workflows.api.views import list_item
    from pikku_workflows.models import WorkflowRun

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))

    def api(url: str) -> Callable[[], Any]:
        def call() -> Any:
            response = client.get(url)
            assert response.status_code == 200, response.content[:300]
            return response.content

        return call

    def orm_list() -> Any:
        runs = (
            WorkflowRun.objects.select_related("started_by")
            .defer("input", "output", "state")
            .order_by("-created_at", "-id")[: PAGE + 1]
        )
        return json.dumps([list_item(run, []) for run in runs])

    def orm_detail() -> Any:
        return json.dumps(pw.get_run_status(uuid.UUID(big_run)))

    cases = [
        ("run list, page of 50", api(f"/api/workflows/runs/?page_size={PAGE}"), orm_list),
        (
            f"detail of a {BIG_RUN_STEPS}-step run",
            api(f"/api/workflows/runs/{big_run}/"),
            orm_detail,
        ),
    ]
    print(f"{args.rounds} requests each after {args.warmup} warm-up, this process, no sockets\n")
    print(
        f"{'':28} {'API req/s':>10} {'p50 ms':>8} {'p95 ms':>8} | {'ORM req/s':>10} "
        f"{'p50 ms':>8} {'p95 ms':>8} | {'ratio':>6}"
    )
    for name, through_api, through_orm in cases:
        a = measure(through_api, args.rounds, args.warmup)
        o = measure(through_orm, args.rounds, args.warmup)
        print(
            f"{name:28} {a['rps']:10.0f} {a['p50']:8.2f} {a['p95']:8.2f} | {o['rps']:10.0f} "
            f"{o['p50']:8.2f} {o['p95']:8.2f} | {o['rps'] / a['rps']:5.2f}x"
        )
    for name, through_api, through_orm in cases:
        print(
            f"\nSQL of one request, {name}: API {len(queries_of(through_api))}, "
            f"ORM {len(queries_of(through_orm))}"
        )
        for sql in queries_of(through_api):
            print("  ", sql[:150])


if __name__ == "__main__":
    main()
