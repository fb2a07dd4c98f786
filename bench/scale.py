"""Reads at scale on PostgreSQL: the API's run list, its counts, the admin's changelist and a
run's detail with 1,000,000 runs in the table (prints, never asserts).

The runs are bulk-loaded by one INSERT ... SELECT (not the engine: the bench measures reads),
their list fields filled as the engine would leave them: workflows, statuses, ages over 90 days,
children, starters, what live runs wait on, error codes. Then a few hundred runs go through the
engine (ten inline steps each, their event log written by the triggers), whose detail and
timeline are read.

Prints p50/p95 of each read through Django's test client in this process (no sockets: the
server's own work): the run list's first page of 50 unfiltered and under each filter (with the
database's own time for the page's query, EXPLAIN ANALYZE), `counts/`,
the admin changelist, a run's detail and timeline; then the EXPLAIN (ANALYZE, BUFFERS) of the
list's first page. The database (`pikku_scale_bench` by default) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = 20
ENGINE_RUNS = 50
ENGINE_STEPS = 10
PAGE = 50

# (status, share of the runs, what a run of it waits on, its error code)
MIX = (
    ("completed", 0.80, None, None),
    ("failed", 0.08, None, "STEP_FAILED"),
    ("cancelled", 0.02, None, None),
    ("suspended", 0.02, "suspend", None),
    ("running", 0.08, None, None),
)
# What running runs wait on, in turn.
LIVE_WAITS = ("step", "timer", "retry", "child", "approval", "signal", "pass")


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
    os.environ["DJANGO_DEBUG"] = "0"  # DEBUG would keep every query in memory
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def status_case(column: str) -> str:
    """SQL picking a value of MIX by `r` (a random number in [0, 1) per row)."""
    branches, edge = [], 0.0
    for status, share, waits, code in MIX:
        edge += share
        value = {"status": status, "waits": waits, "code": code}[column]
        literal = "NULL" if value is None else f"'{value}'"
        branches.append(f"WHEN r < {edge:.4f} THEN {literal}")
    return f"CASE {' '.join(branches)} END"


def bulk_load(runs: int, starter_id: int) -> None:
    """`runs` run rows in one statement (columns it does not set take their model defaults; `%%`
    is SQL's modulo under the statement's parameters); 1 in 20 a child of an earlier run, 1 in
    100 started by the bench user."""
    from django.db import connection

    from bench.purge import insert_series
    from pikku_workflows.engine.store.run_counts import fold_run_count_changes
    from pikku_workflows.models import WorkflowRun

    waits = "ARRAY[" + ", ".join(f"'{w}'" for w in LIVE_WAITS) + "]"
    ended = "status IN ('completed', 'failed', 'cancelled')"
    insert_series(
        WorkflowRun,
        f"""(
            SELECT n, r, {status_case("status")} AS status, {status_case("waits")} AS waits,
                   {status_case("code")} AS code,
                   now() - (interval '90 days' * n / {runs}) AS created
            FROM (SELECT n, random() AS r FROM generate_series(1, {runs}) AS n) numbered
        ) mixed""",
        {
            "id": "gen_random_uuid()",
            "workflow": f"'bench.flow' || (n %% {WORKFLOWS})",
            "status": "status",
            "input": "jsonb_build_object('order', n)",
            "created_at": "created",
            "updated_at": "created",
            "finished_at": f"CASE WHEN {ended} THEN created + interval '3 seconds' END",
            "error": "CASE WHEN code IS NOT NULL "
            "THEN jsonb_build_object('code', code, 'message', 'card declined') END",
            "started_by_id": f"CASE WHEN n %% 100 = 0 THEN {starter_id} END",
            "steps_total": "10",
            "steps_done": "CASE WHEN status = 'completed' THEN 10 ELSE n %% 10 END",
            "current_step_key": "'s' || (n %% 10)",
            "waiting_on": f"CASE WHEN status = 'running' THEN ({waits})[1 + n %% {len(LIVE_WAITS)}] "
            "ELSE waits END",
            "last_error_code": "code",
        },
    )
    with connection.cursor() as cursor:
        # Children: 1 in 20 runs hangs under the run created just before it.
        cursor.execute(
            """
            UPDATE pikku_workflows_workflowrun child SET parent_run_id = parent.id
            FROM (SELECT id, lag(id) OVER (ORDER BY created_at) AS previous,
                         row_number() OVER (ORDER BY created_at) AS position
                  FROM pikku_workflows_workflowrun) parent_of
            JOIN pikku_workflows_workflowrun parent ON parent.id = parent_of.previous
            WHERE child.id = parent_of.id AND parent_of.position % 20 = 0
            """
        )
        cursor.execute("VACUUM ANALYZE pikku_workflows_workflowrun")
    # The children's parents moved 2 counts each: fold them as the next recovery pass would.
    fold_run_count_changes()


def engine_runs() -> list[str]:
    """ENGINE_RUNS runs of ENGINE_STEPS inline steps, through the engine."""
    import pikku_workflows as pw

    @pw.step_function("bench.scale_step")
    def step(data: dict, ctx: Any) -> dict:
        return {"i": data["i"]}

    @pw.workflow("bench.scale", planned_steps=[f"s{i}" for i in range(ENGINE_STEPS)])
    def flow(wf: Any, input: dict) -> int:
        return sum(wf.do(f"s{i}", "bench.scale_step", {"i": i})["i"] for i in range(ENGINE_STEPS))

    return [str(pw.start_workflow("bench.scale", {}, inline=True)) for _ in range(ENGINE_RUNS)]


def engine_run_ids() -> list[Any]:
    from pikku_workflows.models import WorkflowRun

    return list(WorkflowRun.objects.filter(workflow="bench.scale").values_list("pk", flat=True))


def page_execution_ms(client: Any, url: str) -> float:
    """The database's own time for the list page's query of `url` (EXPLAIN ANALYZE)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    page = next(
        query["sql"]
        for query in captured.captured_queries
        if 'FROM "pikku_workflows_workflowrun"' in query["sql"] and "LIMIT" in query["sql"]
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + page)
        return float(cursor.fetchone()[0][0]["Execution Time"])


def measure(call: Callable[[], Any], rounds: int) -> tuple[float, float]:
    call()  # warm: statement caches, the first page's buffers
    latencies = []
    for _ in range(rounds):
        begin = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - begin) * 1000)
    latencies.sort()
    return statistics.median(latencies), latencies[max(int(len(latencies) * 0.95) - 1, 0)]


def first_page_sql(client: Any) -> tuple[str, list[str]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(f"/api/workflows/runs/?page_size={PAGE}")
    statements = [query["sql"] for query in captured.captured_queries]
    page = next(
        sql for sql in statements if "pikku_workflows_workflowrun" in sql and "LIMIT" in sql
    )
    return page, statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pikku_scale_bench"
        ),
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument(
        "--reuse", action="store_true", help="measure the table a previous run left, no load"
    )
    args = parser.parse_args()

    if not args.reuse:
        recreate_database(args.database_url)
    setup_django(args.database_url)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    if args.reuse:
        user = get_user_model().objects.get(username="bench")
        run_ids = [str(pk) for pk in engine_run_ids()]
        print(f"table: {args.runs:,} runs left by a previous run (--reuse)")
    else:
        user = get_user_model().objects.create_superuser("bench", password="bench")
        started = time.perf_counter()
        bulk_load(args.runs, user.pk)
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        run_ids = engine_runs()
        print(
            f"table: {args.runs:,} runs bulk-loaded in {loaded:.0f} s (list fields filled), "
            f"{ENGINE_RUNS} runs of {ENGINE_STEPS} steps through the engine in "
            f"{time.perf_counter() - started:.0f} s"
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute(
            "SELECT pg_size_pretty(pg_total_relation_size('pikku_workflows_workflowrun'))"
        )
        print(f"run table with its indexes: {cursor.fetchone()[0]}")
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} (1 min), {load[1]:.2f} (5 min) on {os.cpu_count()} cores")

    client = Client()
    client.force_login(user)
    parent = run_ids[0]
    from pikku_workflows.models import WorkflowRun

    bulk_run = WorkflowRun.objects.exclude(workflow="bench.scale").values_list("pk", flat=True)[0]

    def get(url: str) -> Callable[[], Any]:
        def call() -> Any:
            response = client.get(url)
            assert response.status_code == 200, (url, response.content[:300])

        return call

    api = "/api/workflows/runs/"
    now = timezone.now()
    day_ago = quote((now - timedelta(days=1)).isoformat())
    months_ago = quote((now - timedelta(days=89)).isoformat())
    lists = [
        ("no filter (top-level runs)", ""),
        ("status=failed", "&status=failed"),
        ("status=running,suspended", "&status=running,suspended"),
        ("workflow=bench.flow7", "&workflow=bench.flow7"),
        ("waiting_on=approval", "&waiting_on=approval"),
        ("awaiting_approval=true", "&awaiting_approval=true"),
        ("started_by=bench", "&started_by=bench"),
        ("started_after (a day ago)", f"&started_after={day_ago}"),
        ("started_before (89 days ago)", f"&started_before={months_ago}"),
        ("finished_after (a day ago)", f"&finished_after={day_ago}"),
        ("level=children", "&level=children"),
        ("has_parent=true", "&has_parent=true"),
        ("parent_run=<a run>", f"&parent_run={parent}"),
        ("status=failed&workflow=bench.flow3", "&status=failed&workflow=bench.flow3"),
        ("id=<a run>", f"&id={parent}"),
    ]
    print(f"\n{args.rounds} requests each, this process, no sockets; p50 / p95 ms")
    print(f"{'API run list, page of 50':48} {'p50':>8} {'p95':>8} {'SQL ms':>8}")
    for name, query in lists:
        url = f"{api}?page_size={PAGE}{query}"
        p50, p95 = measure(get(url), args.rounds)
        print(f"  {name:46} {p50:8.2f} {p95:8.2f} {page_execution_ms(client, url):8.2f}")
    others = [
        ("counts/ (no filter)", f"{api}counts/"),
        ("counts/?group_by=status", f"{api}counts/?group_by=status"),
        (
            "counts/?status=failed&group_by=workflow",
            f"{api}counts/?status=failed&group_by=workflow",
        ),
        ("admin changelist", "/admin/pikku_workflows/workflowrun/"),
        ("run detail (a bulk-loaded run, no steps)", f"{api}{bulk_run}/"),
        (
            "admin changelist, status=failed",
            "/admin/pikku_workflows/workflowrun/?status__exact=failed",
        ),
        (f"run detail ({ENGINE_STEPS} steps)", f"{api}{run_ids[-1]}/"),
        (f"run timeline ({ENGINE_STEPS} steps)", f"{api}{run_ids[-1]}/timeline/"),
    ]
    print(f"{'other reads':48} {'p50':>8} {'p95':>8}")
    for name, url in others:
        p50, p95 = measure(get(url), args.rounds)
        print(f"  {name:46} {p50:8.2f} {p95:8.2f}")

    page, statements = first_page_sql(client)
    print(f"\nthe list's first page: {len(statements)} statements; the page's:\n  {page}\n")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + page)
        for (line,) in cursor.fetchall():
            print("  " + line)


if __name__ == "__main__":
    main()
