"""A 200-way `wf.map` of queued steps on pikku_workflows workers (prints, never asserts).

1. The first pass of the map, run in this process with a timer on every statement: how many
   statements write the queue's table (one: the 200 steps, their history rows and messages
   and the lease's release) and how long that statement and the whole pass take.
2. The map on a 2-process `pikku_worker`: how many passes its body took (start and settle),
   and its wall time (the run's `created_at` to `finished_at`, database timestamps) beside the
   same 200 steps in sequence (`wf.do` in a loop, run in place) on the same workers, rounds
   alternating; the ratio map ÷ sequence, for each step's own work in `--work-ms` (a queued
   member costs a message and a few commits that a step run in place does not: the map wins
   once the steps do work).

See bench/README.md, "gather.py".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.queued import (  # noqa: E402
    database_url,
    recreate_database,
    start_pikku_workers,
    stop,
)

MODULE = "bench.gather_workflows"
ROUND_TIMEOUT = 300


def setup(url: str) -> None:
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="0",
        PIKKU_EXTRA_WORKFLOW_MODULES=MODULE,
    )
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k" * 40)
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def first_pass(n: int) -> None:
    """Run the map's first pass here, every statement timed."""
    from django.db import connection
    from django_q.models import OrmQ

    import pikku_workflows as pw
    from bench.gather_workflows import MAP
    from pikku_workflows import tasks

    run_id = pw.start_workflow(MAP, {"n": n, "ms": 0})
    OrmQ.objects.all().delete()  # this process runs the pass, not a worker
    timed: list[tuple[float, str]] = []

    def timer(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            timed.append((time.perf_counter() - began, sql))

    began = time.perf_counter()
    with connection.execute_wrapper(timer):
        tasks.orchestrate(run_id)
    whole = time.perf_counter() - began
    queue_writes = [(seconds, sql) for seconds, sql in timed if "django_q_ormq" in sql]
    messages = OrmQ.objects.count()
    print(f"first pass of a {n}-way map: {len(timed)} statements, {whole * 1000:.1f} ms")
    print(
        f"  statements writing the queue: {len(queue_writes)} "
        f"({', '.join(f'{s * 1000:.1f} ms' for s, _ in queue_writes)}), messages written: {messages}"
    )
    OrmQ.objects.all().delete()


def timed_run(workflow: str, n: int, ms: int, passes: Path) -> tuple[float, int]:
    """(seconds from created_at to finished_at, passes of its body) of one run on the workers."""
    import pikku_workflows as pw
    from pikku_workflows.models import WorkflowRun

    passes.write_text("")
    run_id = pw.start_workflow(workflow, {"n": n, "ms": ms, "passes": str(passes)})
    deadline = time.monotonic() + ROUND_TIMEOUT
    while True:
        run = WorkflowRun.objects.get(pk=run_id)
        if run.is_settled:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not finish in {ROUND_TIMEOUT} s")
        time.sleep(0.1)
    if run.status != "completed":
        raise RuntimeError(f"run {run_id} {run.status}: {run.error}")
    assert run.finished_at is not None
    seconds = (run.finished_at - run.created_at).total_seconds()
    return seconds, len(passes.read_text().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200, help="items of the map (200)")
    parser.add_argument(
        "--work-ms", default="0,20,50,100", help="each step's own work, ms (several: 0,20,50,100)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--server", default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--database", default="pikku_gather_bench")
    args = parser.parse_args()

    url = database_url(args.server, args.database)
    recreate_database(args.server, args.database)
    setup(url)
    first_pass(args.n)

    from django.db import connections

    from bench.gather_workflows import MAP, SEQUENCE

    connections.close_all()
    works = [int(ms) for ms in args.work_ms.split(",")]
    maps: dict[int, list[float]] = {ms: [] for ms in works}
    sequences: dict[int, list[float]] = {ms: [] for ms in works}
    map_passes: list[int] = []
    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as scratch:
        log, passes = Path(scratch) / "worker.log", Path(scratch) / "passes"
        workers = start_pikku_workers(url, 2, log, module=MODULE)
        try:
            timed_run(SEQUENCE, 10, 0, passes)  # warm the worker processes up
            for _ in range(args.rounds):
                for ms in works:
                    seconds, count = timed_run(MAP, args.n, ms, passes)
                    maps[ms].append(seconds)
                    map_passes.append(count)
                    sequences[ms].append(timed_run(SEQUENCE, args.n, ms, passes)[0])
        finally:
            stop(workers)
    print(f"load average after: {os.getloadavg()}")
    print(f"{args.n}-way map on 2 worker processes; passes of its body per run: {map_passes}")
    for ms in works:
        map_s, seq_s = median(maps[ms]), median(sequences[ms])
        print(
            f"  {ms:4d} ms of work per step: map {', '.join(f'{s:.2f}' for s in maps[ms])} s, "
            f"sequence {', '.join(f'{s:.2f}' for s in sequences[ms])} s; "
            f"map ÷ sequence {map_s / seq_s:.2f} (medians)"
        )


if __name__ == "__main__":
    main()
