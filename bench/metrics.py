"""How long `GET metrics/` takes to read its gauges from the tables, and the dashboard its
figures over 24 h, at many runs (prints, never asserts).

Builds a database of N runs in a few bulk INSERTs (`generate_series`): runs spread over 30 days,
most completed, some failed or cancelled, each ended one with two succeeded steps (a queued
`bench.charge`, an inline `bench.render`) and their history, 1 % running with a queued step
each (half of them due) and their list fields as the engine leaves them, over ten workflows;
then times a cold reading of the metrics (the cache bypassed) and of the dashboard's queries,
each several times, and prints the median and the worst, and with `--explain` each query's plan
(EXPLAIN ANALYZE, BUFFERS). `--reuse` measures the database a previous run built.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.inline import database_url, load_average, recreate_database  # noqa: E402

RUNS_SQL = """
INSERT INTO pikku_workflows_workflowrun (id, workflow, status, state, graph_hash, code_version,
    inline, idempotency_scope, rerun_requested, created_at, updated_at, finished_at,
    retention_hold, priority, steps_total, steps_done, current_step_key, waiting_on)
SELECT gen_random_uuid(), 'bench.workflow_' || (i %% 10),
    CASE WHEN i %% 100 = 0 THEN 'running' WHEN i %% 37 = 0 THEN 'failed'
         WHEN i %% 101 = 0 THEN 'cancelled' ELSE 'completed' END,
    '{}'::jsonb, '', '', false, '', false,
    now() - make_interval(secs => (i %% 2592000)::float8),
    now() - make_interval(secs => (i %% 2592000)::float8),
    CASE WHEN i %% 100 = 0 THEN NULL
         ELSE now() - make_interval(secs => (i %% 2592000)::float8 - 5) END,
    false, 0, 2, CASE WHEN i %% 100 = 0 THEN 0 ELSE 2 END,
    CASE WHEN i %% 100 = 0 THEN 'charge' END, CASE WHEN i %% 100 = 0 THEN 'step' END
FROM generate_series(1, %(runs)s) AS i
"""

STEPS_SQL = """
INSERT INTO pikku_workflows_workflowstep (id, run_id, step_key, kind, function_name, status,
    attempt, attempt_limit, retries, retry_delay, copied, atomic, created_at, updated_at)
SELECT gen_random_uuid(), run.id, 'charge', 'function', 'bench.charge',
    CASE WHEN row_number() OVER () % 2 = 0 THEN 'pending' ELSE 'running' END,
    1, 6, 5, '', false, false, run.created_at, run.created_at
FROM pikku_workflows_workflowrun run WHERE run.status = 'running'
"""

HISTORY_TABLE = "pikku_workflows_workflowstephistory"

ENDED_STEPS_SQL = """
INSERT INTO pikku_workflows_workflowstep (id, run_id, step_key, kind, function_name, status,
    attempt, attempt_limit, retries, retry_delay, copied, atomic, created_at, updated_at)
SELECT gen_random_uuid(), run.id, planned.step_key, 'function', planned.function_name,
    'succeeded', 1, 6, 5, '', false, false, run.created_at, run.created_at
FROM pikku_workflows_workflowrun run
CROSS JOIN (VALUES ('charge', 'bench.charge'), ('render', 'bench.render'))
    AS planned (step_key, function_name)
WHERE run.status <> 'running'
"""

HISTORY_SQL = """
INSERT INTO pikku_workflows_workflowstephistory (step_id, attempt, status, function_name,
    dispatch, created_at, running_at, succeeded_at)
SELECT step.id, 1, 'succeeded', step.function_name,
    CASE step.step_key WHEN 'charge' THEN 'queued' ELSE 'inline' END,
    step.created_at, step.created_at + interval '1 second', step.created_at + interval '2 seconds'
FROM pikku_workflows_workflowstep step
"""


def build(runs: int) -> None:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SQL, {"runs": runs})
        cursor.execute(STEPS_SQL)
        cursor.execute(ENDED_STEPS_SQL)
        # The event log's triggers write a timeline no figure here reads: off for the load.
        cursor.execute(f"ALTER TABLE {HISTORY_TABLE} DISABLE TRIGGER USER")
        cursor.execute(HISTORY_SQL)
        cursor.execute(f"ALTER TABLE {HISTORY_TABLE} ENABLE TRIGGER USER")
        cursor.execute("VACUUM ANALYZE")
    print(f"built {runs:,} runs in {time.perf_counter() - started:.1f} s")


def timed(what: str, read: object, times: int) -> None:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        read()  # type: ignore[operator]
        seconds.append(time.perf_counter() - started)
    print(
        f"{what:<44} median {statistics.median(seconds) * 1000:8.1f} ms · "
        f"worst {max(seconds) * 1000:8.1f} ms ({times} readings)"
    )


def explain(what: str, read: object) -> None:
    """Each query `read` makes: the database's own time and its plan (EXPLAIN ANALYZE)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        read()  # type: ignore[operator]
    print(f"--- {what}: {len(captured.captured_queries)} queries")
    with connection.cursor() as cursor:
        for query in captured.captured_queries:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + query["sql"])
            plan = [row[0] for row in cursor.fetchall()]
            print(f"{plan[-1].strip()}  <- {query['sql'][:160]}")
            for line in plan[:-2]:
                print("    " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server", default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--db", default="pikku_metrics_bench")
    parser.add_argument("-n", "--runs", type=int, default=1_000_000)
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="measure the database left, no build")
    parser.add_argument("--explain", action="store_true", help="print every query's plan")
    args = parser.parse_args()
    print(f"load average at start: {load_average()}")
    if not args.reuse:
        recreate_database(args.server, args.db)
    os.environ["DATABASE_URL"] = database_url(args.server, args.db)
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DJANGO_DEBUG"] = "0"
    import django

    django.setup()
    from django.core.management import call_command
    from django.utils import timezone

    call_command("migrate", interactive=False, verbosity=0)
    import pikku_workflows as pw
    from pikku_workflows.observability import dashboard_figures as figures
    from pikku_workflows.observability.exposition import read_metrics_text

    @pw.step_function("bench.charge", inline=False)
    def charge(data: dict, ctx: object) -> None:
        return None

    @pw.step_function("bench.render")
    def render(data: dict, ctx: object) -> None:
        return None

    if not args.reuse:
        build(args.runs)
    text = read_metrics_text().decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    print(f"GET metrics/ exports {len(series)} series")
    timed("metrics, read from the tables (uncached)", read_metrics_text, args.times)

    window = figures.WINDOWS["24h"]

    def dashboard() -> None:
        now = timezone.now()
        figures.runs_started(window, now)
        ended = figures.ended_runs(window, now)
        figures.runs_finished(ended)
        figures.failure_rates(ended)
        figures.step_durations(window, now)
        figures.queue_lag(window, now)
        figures.approvals_by_age(now)

    timed("dashboard figures, 24 h window", dashboard, args.times)
    if args.explain:
        explain("metrics", read_metrics_text)
        explain("dashboard, 24 h", dashboard)
    print(f"load average after timing: {load_average()}")


if __name__ == "__main__":
    main()
