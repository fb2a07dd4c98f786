"""Update round trips of one long-lived cart run on PostgreSQL (prints, never asserts).

A cart run takes `add` updates (`wf.receive`, `wf.reply`) and hands over with
`wf.continue_as_new` every `--link` steps. One client sends `--updates` updates one after the
other with `pw.update(..., wait="completed")`; one worker thread in the same process runs the
latest run's passes with the queue's own task (`pikku_workflows.tasks.orchestrate`), so a pass
waits in place at `wf.receive` for the next update as on a worker (`RECEIVE_HOLD_SECONDS`), and
replays its link only when it starts. Prints p50 and p99 of the round trip per link of the chain
(flat across the chain is the point), and the most steps any run recorded.

The worker is a thread, not a `pikku_worker` process: the figures leave out the queue's
latency (a pass waiting in place needs no message) and include the client and the worker
sharing one interpreter.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = "bench.cart"


def database_url(server: str, name: str) -> str:
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


def recreate_database(server: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup(url: str, link: int) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    import pikku_workflows as pw

    @pw.workflow(WORKFLOW, updates={"add": lambda input, state, payload: None})
    def cart(wf: Any, input: dict) -> Any:
        total = input["total"]
        while wf.history_length < link:
            message = wf.receive("add")
            total += message.payload["price"]
            wf.reply(message, {"total": total})
        wf.continue_as_new({"total": total})


def worker(first: str, stop: threading.Event) -> None:
    """Drive the chain's latest run whenever it has an update waiting for its pass."""
    from django.db import connection

    from pikku_workflows.engine.store.continue_transitions import latest_in_chain
    from pikku_workflows.models import WorkflowUpdate
    from pikku_workflows.tasks import orchestrate

    try:
        while not stop.is_set():
            latest = latest_in_chain(first)
            if WorkflowUpdate.objects.filter(run_id=latest, completed_at__isnull=True).exists():
                orchestrate(latest)
            else:
                time.sleep(0.0005)
    finally:
        connection.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="pikku_bench_entity")
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--link", type=int, default=1000, help="steps per run of the chain")
    args = parser.parse_args()

    recreate_database(args.server, args.database)
    setup(database_url(args.server, args.database), args.link)
    import pikku_workflows as pw
    from pikku_workflows.engine.store.continue_transitions import chain_from
    from pikku_workflows.models import WorkflowRun, WorkflowStep

    first = pw.start_workflow(WORKFLOW, {"total": 0})
    stop = threading.Event()
    driver = threading.Thread(target=worker, args=(first, stop), daemon=True)
    driver.start()
    trips: list[float] = []
    started = time.perf_counter()
    for index in range(args.updates):
        begun = time.perf_counter()
        answer = pw.update(first, "add", {"price": 1}, timeout="30s")
        trips.append((time.perf_counter() - begun) * 1000)
        assert answer == {"total": index + 1}, answer
    elapsed = time.perf_counter() - started
    stop.set()
    driver.join(10)

    print(f"{args.updates} updates, a hand-over every {args.link} steps, 1 worker thread")
    print(f"total {elapsed:.1f} s, {args.updates / elapsed:.0f} updates/s")
    print(f"all: p50 {statistics.median(trips):.1f} ms, p99 {percentile(trips, 0.99):.1f} ms")
    for link in range(0, len(trips), args.link):
        part = trips[link : link + args.link]
        print(
            f"link {link // args.link + 1}: p50 {statistics.median(part):.1f} ms, "
            f"p99 {percentile(part, 0.99):.1f} ms"
        )
    chain = chain_from(WorkflowRun.objects.get(pk=first).pk)
    most = max(WorkflowStep.objects.filter(run_id=run).count() for run in chain)
    print(f"runs in the chain: {len(chain)}; most steps in one run: {most}")


if __name__ == "__main__":
    main()
