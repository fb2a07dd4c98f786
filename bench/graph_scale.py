"""Graph runs at scale on PostgreSQL: what registering a large graph costs, and whether a long
graph run's cost per step stays flat (prints, never asserts). See bench/README.md.

- registration: a 10,000-node chain, a 1,000-node DAG of 50 edges per node and a fan-out of
  4,998 branches with their join validated and registered (GRAPH_MAX_NODES raised for the
  chain), and a graph over the cap refused;
- a sequential for_each over N items (default 20,000): the rate of its first and last W items
  (default 1,000) and their ratio, from each item's database timestamp;
- a two-node cycle to max_visits=1000 (2,000 steps): its time, and its first and last 200 steps.

Both runs go twice: `inline` (started with `inline=True`, every step a step function run in the
pass: the planner and the engine alone) and `worker` (a `manage.py pikku_worker` with one worker
process; every step a queued step function, run in place by the worker's pass, so each message
of the run replays its steps).

The database (`pikku_graph_bench` by default) is dropped and recreated at every start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULE = "bench.graph_workflows"
READY_TIMEOUT = 60


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DJANGO_DEBUG"] = "0"  # DEBUG would keep every query in memory
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k" * 40)
    os.environ["PIKKU_EXTRA_WORKFLOW_MODULES"] = MODULE
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


# --------------------------------------------------------------------------------------------
# Registration


def chain(nodes: int) -> dict[str, Any]:
    graph = {f"n{i}": {"function": "bench.graph.item", "next": f"n{i + 1}"} for i in range(nodes)}
    del graph[f"n{nodes - 1}"]["next"]
    return {"entry": "n0", "nodes": graph}


def dense_dag(nodes: int, fan: int) -> dict[str, Any]:
    graph = {}
    for i in range(nodes):
        targets = [f"n{j}" for j in range(i + 1, min(nodes, i + 1 + fan))]
        graph[f"n{i}"] = {"function": "bench.graph.item", **({"next": targets} if targets else {})}
    return {"entry": "n0", "nodes": graph}


def fan_out_and_join(width: int) -> dict[str, Any]:
    branch = {"function": "bench.graph.item", "next": "join"}
    graph = {f"n{i}": branch for i in range(width)}
    start = {"function": "bench.graph.item", "next": list(graph)}
    return {
        "entry": "start",
        "nodes": {"start": start, **graph, "join": {"function": "bench.graph.item"}},
    }


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    try:
        outcome = action()
    except Exception as exc:
        outcome = exc
    return time.perf_counter() - started, outcome


def measure_registration() -> None:
    from django.test import override_settings

    import pikku_workflows as pw
    from pikku_workflows.conf import pikku_settings

    cap = pikku_settings.GRAPH_MAX_NODES
    print(f"\nRegistration (GRAPH_MAX_NODES = {cap}):")
    long_chain, dense, wide, huge = (
        chain(10_000),
        dense_dag(1000, 50),
        fan_out_and_join(4998),
        chain(100_000),
    )
    with override_settings(PIKKU_WORKFLOWS={"GRAPH_MAX_NODES": 10_000}):
        seconds, _ = timed(lambda: pw.graph_workflow("bench.graph.chain", long_chain))
    print(f"  10,000-node chain (cap raised to 10,000): {seconds:.2f} s")
    seconds, _ = timed(lambda: pw.graph_workflow("bench.graph.dense", dense))
    print(f"  1,000-node DAG, 50 edges per node (48,775 edges): {seconds:.2f} s")
    seconds, _ = timed(lambda: pw.graph_workflow("bench.graph.wide", wide))
    print(f"  a fan-out of 4,998 branches and their join (5,000 nodes): {seconds:.2f} s")
    seconds, refused = timed(lambda: pw.graph_workflow("bench.graph.huge", huge))
    print(f"  100,000-node chain: {type(refused).__name__} in {seconds:.2f} s: {refused}")


# --------------------------------------------------------------------------------------------
# Runs


def item_times(run_id: str) -> list[float]:
    """Each item's settle time (database clock), in item order."""
    from pikku_workflows.models import WorkflowStep

    rows = WorkflowStep.objects.filter(run_id=run_id, step_key__startswith="each[")
    by_index = {
        int(key[len("each[") : -1]): updated.timestamp()
        for key, updated in rows.values_list("step_key", "updated_at")
    }
    return [by_index[index] for index in sorted(by_index)]


def step_times(run_id: str) -> list[float]:
    from pikku_workflows.models import WorkflowStep

    rows = WorkflowStep.objects.filter(run_id=run_id, status="succeeded").order_by("updated_at")
    return [updated.timestamp() for updated in rows.values_list("updated_at", flat=True)]


def rates(times: list[float], window: int) -> str:
    window = min(window, len(times) // 2)
    first = times[window] - times[0]
    last = times[-1] - times[-1 - window]
    per_minute = 60 * window
    return (
        f"first {window}: {per_minute / first:,.0f}/min ({1000 * first / window:.2f} ms each), "
        f"last {window}: {per_minute / last:,.0f}/min ({1000 * last / window:.2f} ms each), "
        f"last ÷ first time {last / first:.2f}x"
    )


def wait_for_end(run_id: str, timeout: float) -> tuple[str, float]:
    from django.db import connection

    from pikku_workflows.models import WorkflowRun

    started = time.monotonic()
    while time.monotonic() - started < timeout:
        status = WorkflowRun.objects.values_list("status", flat=True).get(pk=run_id)
        if status in ("completed", "failed", "cancelled"):
            return status, time.monotonic() - started
        connection.close()  # a fresh snapshot each poll, and no idle transaction
        time.sleep(0.5)
    return "still running", timeout


def run_inline(workflow: str, data: dict[str, Any]) -> tuple[str, str, float]:
    import pikku_workflows as pw

    started = time.perf_counter()
    try:
        run_id = pw.start_workflow(workflow, data, inline=True)
    except pw.RunFailed as exc:  # the cycle ends at max_visits
        run_id = exc.run_id
    seconds = time.perf_counter() - started
    return str(run_id), pw.get_run_status(run_id)["status"], seconds


def start_worker(url: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "PIKKU_Q_WORKERS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("Q_CLUSTER_NAME", None)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "pikku_worker", "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_TIMEOUT
    while "pikku_worker: cluster" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start ({log}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return process


def run_on_worker(workflow: str, data: dict[str, Any], timeout: float) -> tuple[str, str, float]:
    import pikku_workflows as pw

    run_id = str(pw.start_workflow(workflow, data))
    status, seconds = wait_for_end(run_id, timeout)
    return run_id, status, seconds


def measure_runs(mode: str, items: int, window: int, timeout: float) -> None:
    from bench import graph_workflows as flows

    queued = mode == "worker"
    start = (lambda w, d: run_on_worker(w, d, timeout)) if queued else run_inline
    for_each = flows.FOR_EACH_QUEUED if queued else flows.FOR_EACH
    cycle = flows.CYCLE_QUEUED if queued else flows.CYCLE
    print(f"\n{mode}:")
    run_id, status, seconds = start(for_each, {"n": items})
    times = item_times(run_id)
    print(f"  sequential for_each over {items:,} items: {status} in {seconds:.1f} s")
    print(f"    {rates(times, window)}")
    run_id, status, seconds = start(cycle, {})
    times = step_times(run_id)
    print(f"  two-node cycle to max_visits=1000: {len(times)} steps, {status} in {seconds:.1f} s")
    print(f"    {rates(times, 200)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--server", default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--database", default="pikku_graph_bench")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--modes", default="inline,worker")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-registration", action="store_true")
    return parser.parse_args()


def main() -> None:
    sys.path.insert(0, str(ROOT))  # `bench` itself, run as a script
    from bench.inline import database_url, recreate_database
    from bench.queued import stop

    args = parse_args()
    url = database_url(args.server, args.database)
    recreate_database(args.server, args.database)
    setup_django(url)
    print(f"pikku_workflows graphs on {url} (recreated); load average {os.getloadavg()}")
    if not args.no_registration:
        measure_registration()
    for mode in args.modes.split(","):
        if mode == "worker":
            with tempfile.TemporaryDirectory() as directory:
                worker = start_worker(url, Path(directory) / "worker.log")
                try:
                    measure_runs(mode, args.items, args.window, args.timeout)
                finally:
                    stop([worker])
        else:
            measure_runs(mode, args.items, args.window, args.timeout)
    print(f"\nload average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
