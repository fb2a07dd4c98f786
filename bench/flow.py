"""Flow control on pikku_workflows workers (prints, never asserts).

1. Concurrency under load: `--runs` runs over `--keys` keys with `max_active=2` on a
   `--workers`-process `pikku_worker`, a sampler reading every 10 ms how many runs of each key
   are admitted (running) and how many slots each key's count row says are held: the most it
   ever saw. Throughput beside the same runs of a workflow without a rule, rounds alternating.
2. What admission costs a start, in this process: statements per start with a rule and
   without, and the p50 of a start's wall time each way.
3. GCRA: 100 starts as fast as this process can make them against `rate="10/s", burst=5`: each
   run's `not_before` beside the GCRA time of its request computed in Python
   (`pikku_workflows.flow.schedule_start` from the run's `created_at`), then a worker started
   and a 10 ms sampler noting when each run was seen admitted (its lag after `not_before`).
4. kill -9 of the worker holding both slots of a key mid-step (with others queued behind): how
   long until the slots are free and the queued runs admitted, beside the run lease
   (`PIKKU_RUN_LEASE_SECONDS`, set low here) a second worker's recovery waits out.

See bench/README.md, "flow.py".
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.queued import (  # noqa: E402
    database_url,
    recreate_database,
    start_pikku_workers,
    stop,
)

MODULE = "bench.flow_workflows"
ROUND_TIMEOUT = 900
SAMPLE_SECONDS = 0.01
LEASE_SECONDS = 6


def setup(url: str) -> None:
    os.environ.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="project.settings",
        DJANGO_DEBUG="0",
        PIKKU_EXTRA_WORKFLOW_MODULES=MODULE,
        PIKKU_RUN_LEASE_SECONDS=str(LEASE_SECONDS),
        PIKKU_STEP_LEASE_SECONDS=str(LEASE_SECONDS),
        PIKKU_RECOVERY_INTERVAL_SECONDS="1",
    )
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k" * 40)
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def clear_runs() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pikku_workflows_workflowrun, pikku_workflows_workflowslot, "
            "pikku_workflows_workflowslotcount, pikku_workflows_workflowrate, django_q_ormq CASCADE"
        )


class Sampler(threading.Thread):
    """Every 10 ms: the most runs of one key seen running at once, and the most slots one key's
    count row said were held."""

    def __init__(self, workflow: str) -> None:
        super().__init__(daemon=True)
        self.workflow = workflow
        self.stopping = threading.Event()
        self.most_running = 0
        self.most_held = 0
        self.samples = 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            while not self.stopping.is_set():
                running = conn.execute(
                    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM "
                    "pikku_workflows_workflowrun WHERE workflow = %s AND status = 'running' "
                    "GROUP BY concurrency_key) AS per_key",
                    [self.workflow],
                ).fetchone()[0]
                held = conn.execute(
                    "SELECT coalesce(max(held), 0) FROM pikku_workflows_workflowslotcount "
                    "WHERE rule = %s",
                    [f"workflow:{self.workflow}"],
                ).fetchone()[0]
                self.most_running = max(self.most_running, running)
                self.most_held = max(self.most_held, held)
                self.samples += 1
                time.sleep(SAMPLE_SECONDS)


def wait_until_settled(workflow: str, timeout: float = ROUND_TIMEOUT) -> None:
    from pikku_workflows.models import WorkflowRun

    deadline = time.monotonic() + timeout
    while (
        WorkflowRun.objects.filter(workflow=workflow)
        .exclude(status__in=["completed", "failed", "cancelled"])
        .exists()
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workflow}: runs still unsettled after {timeout} s")
        time.sleep(0.25)


def wall_seconds(workflow: str) -> float:
    from django.db.models import Max, Min

    from pikku_workflows.models import WorkflowRun

    span = WorkflowRun.objects.filter(workflow=workflow).aggregate(
        first=Min("created_at"), last=Max("finished_at")
    )
    return (span["last"] - span["first"]).total_seconds()


def load_round(workflow: str, runs: int, keys: int) -> tuple[float, Sampler]:
    import pikku_workflows as pw

    clear_runs()
    sampler = Sampler(workflow)
    sampler.start()
    for n in range(runs):
        pw.start_workflow(workflow, {"key": f"k{n % keys}", "n": n})
    wait_until_settled(workflow)
    sampler.stopping.set()
    sampler.join()
    return runs / wall_seconds(workflow), sampler


def measure_load(url: str, runs: int, keys: int, workers: int, rounds: int, log: Path) -> None:
    from bench.flow_workflows import FREE, RULED

    print(f"\n1. {runs} runs over {keys} keys, max_active=2, {workers} worker processes")
    processes = start_pikku_workers(url, workers, log, module=MODULE)
    try:
        ruled, free = [], []
        for _ in range(rounds):
            rate, sampler = load_round(RULED, runs, keys)
            ruled.append(rate)
            print(
                f"   with the rule:    {rate:7.1f} runs/s; sampler ({sampler.samples} samples "
                f"every 10 ms) saw at most {sampler.most_running} runs of one key running, "
                f"{sampler.most_held} slots of one key held"
            )
            rate, _ = load_round(FREE, runs, keys)
            free.append(rate)
            print(f"   without a rule:   {rate:7.1f} runs/s")
        print(
            f"   throughput with the rule / without: "
            f"{statistics.median(ruled) / statistics.median(free):.0%} (medians)"
        )
    finally:
        stop(processes)


def measure_start_cost(starts: int) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import pikku_workflows as pw
    from bench.flow_workflows import FREE, RULED

    print(f"\n2. What admission costs a start ({starts} starts each way, no worker)")
    for workflow in (FREE, RULED):
        clear_runs()
        with CaptureQueriesContext(connection) as queries:
            pw.start_workflow(workflow, {"key": "k0", "n": 0})
        times = []
        for n in range(starts):
            began = time.perf_counter()
            pw.start_workflow(workflow, {"key": f"k{n % 100}", "n": n})
            times.append((time.perf_counter() - began) * 1000)
        statements = [q["sql"].split()[0] for q in queries.captured_queries]
        print(
            f"   {'with a rule' if workflow == RULED else 'without   '}: {len(statements)} "
            f"statements ({', '.join(statements)}), start p50 {statistics.median(times):.2f} ms"
        )


def measure_gcra(url: str, log: Path) -> None:
    import pikku_workflows as pw
    from bench.flow_workflows import LIMIT, RATED
    from pikku_workflows.flow import schedule_start
    from pikku_workflows.models import WorkflowRun

    print('\n3. GCRA: 100 starts against rate="10/s", burst=5')
    clear_runs()
    rate = pw.define_limit(LIMIT, rate="10/s", burst=5).rate
    for n in range(100):
        pw.start_workflow(RATED, {"n": n})
    rows = list(
        WorkflowRun.objects.filter(workflow=RATED)
        .order_by("created_at")
        .values_list("pk", "created_at", "not_before", "status")
    )
    tat, errors = None, []
    for _, created, not_before, _ in rows:
        now_ms = created.timestamp() * 1000
        begins, tat = schedule_start(rate, tat, now_ms)
        errors.append(abs(not_before.timestamp() * 1000 - begins))
    span = (rows[-1][2] - rows[0][1]).total_seconds()
    print(
        f"   not_before beside the GCRA time of each request: max |difference| "
        f"{max(errors):.1f} ms (the database clock when the statement ran beside the request's "
        f"created_at, taken just before it), {sum(r[3] == 'running' for r in rows)} admitted at once, the "
        f"last may begin {span:.2f} s after the first request"
    )
    seen: dict[str, datetime] = {}
    stopping = threading.Event()

    def sample() -> None:
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            while not stopping.is_set():
                now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
                for (pk,) in conn.execute(
                    "SELECT id FROM pikku_workflows_workflowrun WHERE workflow = %s "
                    "AND status <> 'queued'",
                    [RATED],
                ).fetchall():
                    seen.setdefault(str(pk), now)
                time.sleep(SAMPLE_SECONDS)

    processes = start_pikku_workers(url, 1, log, module=MODULE)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wait_until_settled(RATED)
    finally:
        stopping.set()
        sampler.join()
        stop(processes)
    lags = [
        (seen[str(pk)] - not_before).total_seconds() * 1000
        for pk, created, not_before, status in rows
        if status == "queued" and str(pk) in seen
    ]
    lags.sort()
    print(
        f"   {len(lags)} queued runs admitted by the timer loop: lag after not_before "
        f"p50 {statistics.median(lags):.0f} ms, p95 {lags[int(len(lags) * 0.95) - 1]:.0f} ms, "
        f"max {lags[-1]:.0f} ms (the 10 ms sampler's own resolution included; the worker's "
        f"process started while the first were already due)"
    )


def measure_kill(url: str, log_dir: Path) -> None:
    import pikku_workflows as pw
    from bench.flow_workflows import HOLDER
    from pikku_workflows.models import WorkflowRun, WorkflowSlot

    print(f"\n4. kill -9 of the worker holding both slots (run lease {LEASE_SECONDS} s)")
    clear_runs()
    # Two processes, so both holders are mid-step at once when the kill comes.
    victim = start_pikku_workers(url, 2, log_dir / "victim.log", module=MODULE)
    rescuer: list = []
    try:
        holders = [pw.start_workflow(HOLDER, {"n": n, "seconds": 5}) for n in range(2)]
        queued = [pw.start_workflow(HOLDER, {"n": n, "seconds": 0}) for n in range(2, 4)]
        deadline = time.monotonic() + 300
        while WorkflowRun.objects.filter(pk__in=holders, steps__status="running").count() < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the holders never started their step")
            time.sleep(0.05)
        rescuer = start_pikku_workers(url, 1, log_dir / "rescuer.log", module=MODULE)
        for process in victim:
            os.killpg(process.pid, signal.SIGKILL)
        killed = time.monotonic()
        freed = admitted = None
        while freed is None or admitted is None:
            if time.monotonic() - killed > 300:
                raise RuntimeError("slots never freed")
            if freed is None and not WorkflowSlot.objects.filter(run_id__in=holders).exists():
                freed = time.monotonic() - killed
            if (
                admitted is None
                and not WorkflowRun.objects.filter(pk__in=queued, status="queued").exists()
            ):
                admitted = time.monotonic() - killed
            time.sleep(SAMPLE_SECONDS)
    finally:
        stop(victim + rescuer)
    print(
        f"   the holders' slots free {freed:.2f} s after the kill (their runs resumed by the "
        f"other worker once the run lease lapsed, their 5 s step run again, the runs ended); "
        f"the queued runs admitted {admitted:.2f} s after it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432/")
    parser.add_argument("--database", default="pikku_bench_flow")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--sections", default="1234", help="which sections to run, e.g. 4")
    args = parser.parse_args()
    recreate_database(args.server, args.database)
    url = database_url(args.server, args.database)
    setup(url)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as logs:
        log_dir = Path(logs)
        if "1" in args.sections:
            measure_load(url, args.runs, args.keys, args.workers, args.rounds, log_dir / "l.log")
        if "2" in args.sections:
            measure_start_cost(args.starts)
        if "3" in args.sections:
            measure_gcra(url, log_dir / "gcra.log")
        if "4" in args.sections:
            measure_kill(url, log_dir)


if __name__ == "__main__":
    main()
