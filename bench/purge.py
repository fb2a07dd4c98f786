"""Retention on PostgreSQL: purging RUNS ended runs of STEPS steps each (with a history row per
step and an audit row per run), beside a thread claiming steps of other, running runs (prints,
never asserts).

Prints the purge's runs/s, its longest batch (how long one batch's transaction held its row
locks, `longest_batch_ms` of `pw.purge_runs`), and the p50/p99 latency of a step claim
(`claim_next_attempt`, the worker's general claim: one short transaction) measured first
alone, then while the purge runs, with their ratio. The table is filled with INSERT ... SELECT
from generate_series (the bench measures the purge, not the engine's inserts); columns the
bench does not set take their model defaults, read from `_meta`. The database
(`pikku_purge_bench` by default) is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNS = 100_000
STEPS = 10
CLAIMABLE_RUNS = 3_000  # running runs whose pending steps the claimer takes, 10 each
WORKFLOW = "bench.purge_order"

sys.path.insert(0, str(ROOT))
from bench.api import recreate_database, setup_django  # noqa: E402 - the bench's own database


def register_workflow() -> None:
    import pikku_workflows as pw

    @pw.workflow(WORKFLOW)
    def order(wf: Any, input: dict) -> dict:  # registered for the claims; never run here
        return {}


def insert_series(model: Any, series: str, values: dict[str, str]) -> None:
    """INSERT INTO model's table SELECT ... FROM `series`: `values` maps columns to SQL
    expressions over the series; every other column takes NULL or its model default."""
    from django.db import connection

    columns, expressions, params = [], [], []
    for field in model._meta.concrete_fields:
        if field.db_returning and field.column not in values:
            continue  # an auto-incremented key or a database default: the database fills it
        columns.append(connection.ops.quote_name(field.column))
        if field.column in values:
            expressions.append(values[field.column])
        elif field.null:
            expressions.append("NULL")
        else:
            expressions.append("%s")
            params.append(field.get_db_prep_save(field.get_default(), connection))
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"SELECT {', '.join(expressions)} FROM {series}",
            params,
        )


def fill(runs: int) -> None:
    """`runs` completed runs that ended 40 days ago, and CLAIMABLE_RUNS running runs, each with
    STEPS steps (succeeded, or pending for the claimer), a history row per step, an audit row
    per run."""
    from django.db import connection

    from pikku_workflows.models import (
        WorkflowAuditEntry,
        WorkflowRun,
        WorkflowStep,
        WorkflowStepHistory,
    )

    total = runs + CLAIMABLE_RUNS
    ended = f"g <= {runs}"
    insert_series(
        WorkflowRun,
        f"generate_series(1, {total}) g",
        {
            "id": "md5('run' || g)::uuid",
            "workflow": f"'{WORKFLOW}'",
            "status": f"CASE WHEN {ended} THEN 'completed' ELSE 'running' END",
            "input": """jsonb_build_object('order', g)""",
            "created_at": "now() - interval '41 days'",
            "updated_at": "now()",
            "finished_at": f"CASE WHEN {ended} THEN now() - interval '40 days' END",
        },
    )
    steps = f"generate_series(1, {total}) g CROSS JOIN generate_series(0, {STEPS - 1}) k"
    insert_series(
        WorkflowStep,
        steps,
        {
            "id": "md5('step' || g || '-' || k)::uuid",
            "run_id": "md5('run' || g)::uuid",
            "step_key": "'s' || k",
            "function_name": "'bench.step'",
            "status": f"CASE WHEN {ended} THEN 'succeeded' ELSE 'pending' END",
            "result": f"CASE WHEN {ended} THEN jsonb_build_object('i', k) END",
            "created_at": "now() - interval '41 days' + k * interval '1 second'",
            "updated_at": "now()",
        },
    )
    with connection.cursor() as cursor:
        # The history and audit triggers write the event log row by row, each event noted for
        # numbering at commit (a list that grows with the transaction: hours for a bulk load);
        # the bench turns them off and writes the same events set-based below.
        cursor.execute("SET session_replication_role = replica")
    insert_series(
        WorkflowStepHistory,
        steps,
        {
            "step_id": "md5('step' || g || '-' || k)::uuid",
            "attempt": "1",
            "status": f"CASE WHEN {ended} THEN 'succeeded' ELSE 'pending' END",
            "created_at": "now() - interval '41 days'",
            "succeeded_at": f"CASE WHEN {ended} THEN now() - interval '40 days' END",
        },
    )
    insert_series(
        WorkflowAuditEntry,
        f"generate_series(1, {runs}) g",
        {
            "run_id": "md5('run' || g)::uuid",
            "action": "'retry'",
            "created_at": "now() - interval '40 days'",
        },
    )
    event_log = import_module("pikku_workflows.migrations.0013_event_log")
    with connection.cursor() as cursor:
        cursor.execute(event_log._backfill_select(f"SELECT id FROM {WorkflowRun._meta.db_table}"))
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("VACUUM ANALYZE")


class Claimer(threading.Thread):
    """Claims the pending steps of the running runs one by one, one transaction each, and
    keeps each claim's latency under the label `phase` says."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        from pikku_workflows.models import WorkflowStep

        self.pending = list(
            WorkflowStep.objects.filter(status="pending")
            .order_by("?")
            .values_list("run_id", "step_key")
        )
        self.phase = "alone"
        self.latencies: dict[str, list[float]] = {"alone": [], "beside the purge": []}
        self.stop = threading.Event()

    def run(self) -> None:
        from django.db import connection

        from pikku_workflows.engine.replay.attempts import claim_next_attempt

        try:
            while not self.stop.is_set() and self.pending:
                run_id, step_key = self.pending.pop()
                began = time.perf_counter()
                claim = claim_next_attempt(run_id, step_key)
                self.latencies[self.phase].append((time.perf_counter() - began) * 1000)
                assert claim.claimed, (run_id, step_key)
        finally:
            connection.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pikku_purge_bench"
        ),
    )
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs to purge ({RUNS:,})")
    parser.add_argument("--batch", type=int, default=1000, help="PURGE_BATCH (1000)")
    parser.add_argument(
        "--alone-seconds", type=float, default=10, help="claims measured alone first (10 s)"
    )
    args = parser.parse_args()

    recreate_database(args.database_url)
    setup_django(args.database_url)
    register_workflow()
    began = time.perf_counter()
    fill(args.runs)
    print(
        f"table: {args.runs:,} ended runs x {STEPS} steps (+ history, audit) and "
        f"{CLAIMABLE_RUNS:,} running runs x {STEPS} pending steps "
        f"({time.perf_counter() - began:.0f} s to fill); load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )

    import pikku_workflows as pw

    claimer = Claimer()
    claimer.start()
    time.sleep(args.alone_seconds)
    claimer.phase = "beside the purge"
    began = time.perf_counter()
    counts = pw.purge_runs(older_than="30d", batch=args.batch)
    elapsed = time.perf_counter() - began
    claimer.stop.set()
    claimer.join(30)

    print(
        f"purge: {counts['runs']:,} runs in {counts['batches']} batches of {args.batch} in "
        f"{elapsed:.1f} s = {counts['runs'] / elapsed:,.0f} runs/s (target >= 1,500); "
        f"rows deleted {sum(counts['rows'].values()):,}"
    )
    print(f"longest batch holding its locks: {counts['longest_batch_ms']:.0f} ms (target <= 250)")
    alone, beside = claimer.latencies["alone"], claimer.latencies["beside the purge"]
    for label, values in claimer.latencies.items():
        print(
            f"step claim {label}: {len(values):,} claims, p50 {statistics.median(values):.2f} ms,"
            f" p99 {percentile(values, 0.99):.2f} ms"
        )
    ratio = percentile(beside, 0.99) / percentile(alone, 0.99)
    print(f"claim p99 beside the purge / alone: {ratio:.2f}x (target <= 1.2x)")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
