"""A gather of async in-process steps on PostgreSQL (prints, never asserts).

A body gathers `--members` calls of an `async def` step function that awaits `--io-ms` of I/O
(`asyncio.sleep`): the pass awaits them together on its event loop, then records each. Prints
the wall time of whole runs (start, the pass, every step recorded, the run completed) driven
in this process by an inline caller and by a pass as a worker runs it (`tasks.orchestrate`),
beside the same gather of a sync step function that sleeps as long (its members run one after
the other), and the goal: the async gather of 20 steps of 100 ms completes in ≤ 300 ms.

See bench/README.md, "async_gather.py".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.entity import database_url, recreate_database  # noqa: E402

ASYNC_GATHER = "bench.async_gather"
SYNC_GATHER = "bench.sync_gather"
GOAL_MS = 300


def setup(url: str) -> None:
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="project.settings", DJANGO_DEBUG="0")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k" * 40)
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    import pikku_workflows as pw

    @pw.step_function("bench.async_io")
    async def async_io(data: dict, ctx: Any) -> int:
        await asyncio.sleep(data["ms"] / 1000)
        return data["index"]

    @pw.step_function("bench.sync_io")
    def sync_io(data: dict, ctx: Any) -> int:
        time.sleep(data["ms"] / 1000)
        return data["index"]

    def gather_of(function: str) -> Callable[[Any, dict], list]:
        def body(wf: Any, input: dict) -> list:
            calls = [
                wf.call(f"io{index}", function, {"index": index, "ms": input["ms"]})
                for index in range(input["members"])
            ]
            return wf.gather(*calls)

        return body

    pw.workflow(ASYNC_GATHER)(gather_of("bench.async_io"))
    pw.workflow(SYNC_GATHER)(gather_of("bench.sync_io"))


def inline_run_ms(workflow: str, input: dict) -> float:
    import pikku_workflows as pw

    began = time.perf_counter()
    output = pw.run_to_completion(workflow, input)
    elapsed = (time.perf_counter() - began) * 1000
    assert output == list(range(input["members"])), output
    return elapsed


def worker_pass_ms(workflow: str, input: dict) -> float:
    """Start the run, then time one pass of it as a worker runs it (the start is left out)."""
    from django_q.models import OrmQ

    import pikku_workflows as pw
    from pikku_workflows import tasks
    from pikku_workflows.models import WorkflowRun
    from pikku_workflows.status import RunStatus

    run_id = pw.start_workflow(workflow, input)
    OrmQ.objects.all().delete()  # this process runs the pass, not a worker
    began = time.perf_counter()
    tasks.orchestrate(run_id)
    elapsed = (time.perf_counter() - began) * 1000
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
    return elapsed


def report(label: str, figures: list[float]) -> None:
    print(
        f"{label:<44} median {statistics.median(figures):7.1f} ms   "
        f"max {max(figures):7.1f} ms   ({len(figures)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="pikku_bench_async_gather")
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--io-ms", type=int, default=100)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    recreate_database(args.server, args.database)
    setup(database_url(args.server, args.database))
    input = {"members": args.members, "ms": args.io_ms}
    inline_run_ms(ASYNC_GATHER, input)  # warm-up: connections, statement preparation

    async_inline = [inline_run_ms(ASYNC_GATHER, input) for _ in range(args.runs)]
    async_worker = [worker_pass_ms(ASYNC_GATHER, input) for _ in range(args.runs)]
    sync_inline = [inline_run_ms(SYNC_GATHER, input) for _ in range(max(args.runs // 5, 1))]

    print(f"gather of {args.members} steps, each awaiting {args.io_ms} ms of I/O")
    report("async def, inline caller (whole run)", async_inline)
    report("async def, one worker pass", async_worker)
    report("sync def (time.sleep), inline caller", sync_inline)
    worst = max(async_inline + async_worker)
    verdict = "met" if worst <= GOAL_MS else "missed"
    print(f"goal: the async gather completes in <= {GOAL_MS} ms: {verdict} (worst {worst:.1f} ms)")


if __name__ == "__main__":
    main()
