"""What an inline step costs, counted rather than timed (prints, never asserts).

Runs `bench/inline.py`'s workflow (K inline steps of a trivial step function) on PostgreSQL and
prints figures a loaded machine does not blur much:

- statements per run at a small and a large K (Django's `CaptureQueriesContext`, BEGIN and
  COMMIT included) and commits per run;
- CPU per step of this process (its thread's CPU clock) and of its server backend (the
  kernel's `/proc/<pid>/schedstat`, so the server must run on this machine), over the first and
  the last `--window` steps of one large run: a cost that grows with the run's length shows as
  a ratio above 1;
- the share of the updates to the engine's tables that were HOT (`pg_stat_user_tables`).

    .venv/bin/python bench/step_cost.py

The database `pikku_step_cost` is dropped and recreated at start (`--db`, `--server`).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.inline as inline  # noqa: E402 - the benches' own workflow and helpers

TABLES = ("workflowrun", "workflowstep", "workflowstephistory", "workflowevent")


def backend_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def statements_per_run(k: int) -> tuple[int, int]:
    """(statements, commits) of one run of K steps, BEGIN/COMMIT left out of the first."""
    profile = inline.profile_pikku_queries(k)
    sql = [q["sql"] for q in profile.log]
    statements = sum(not inline.is_transaction_control(s) for s in sql)
    explicit = sum(s.strip().upper().startswith("COMMIT") for s in sql)
    # Outside a transaction each statement commits on its own (autocommit).
    return statements, explicit + statements - in_transactions(sql)


def in_transactions(sql: list[str]) -> int:
    inside, count = False, 0
    for s in sql:
        head = s.strip().upper()
        if head.startswith("BEGIN"):
            inside = True
        elif head.startswith(("COMMIT", "ROLLBACK")):
            inside = False
        elif inside and not inline.is_transaction_control(s):
            count += 1
    return count


def windows(run, k: int, window: int, pid: int) -> tuple[list[float], list[float]]:
    """Per-step CPU (µs) of this thread and of the backend, first and last `window` steps."""
    marks: list[tuple[int, int]] = []
    inline.PROBE = lambda: marks.append((time.thread_time_ns(), backend_cpu_ns(pid)))
    try:
        run(k)
    finally:
        inline.PROBE = None
    gaps = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(marks)]
    head, tail = gaps[:window], gaps[-window:]
    return (
        [sum(g[0] for g in head) / window / 1000, sum(g[0] for g in tail) / window / 1000],
        [sum(g[1] for g in head) / window / 1000, sum(g[1] for g in tail) / window / 1000],
    )


def table_updates() -> dict[str, tuple[int, int, int]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = ANY(%s)",
            [[f"pikku_workflows_{t}" for t in TABLES]],
        )
        return {name: (ins, upd, hot) for name, ins, upd, hot in cursor.fetchall()}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server", default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--db", default="pikku_step_cost")
    parser.add_argument("--small-k", type=int, default=10)
    parser.add_argument("--large-k", type=int, default=1000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--large-runs", type=int, default=3)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    inline.recreate_database(args.server, args.db)
    run = inline.setup_pikku(inline.database_url(args.server, args.db))
    from django.db import connection

    for _ in range(3):
        run(args.small_k)

    for k in (args.small_k, args.large_k):
        statements, commits = statements_per_run(k)
        print(f"K={k}: {statements} statements, {commits} commits per run")

    pid = connection.cursor().connection.info.backend_pid
    before = table_updates()
    client, server = [], []
    for _ in range(args.large_runs):
        c, s = windows(run, args.large_k, args.window, pid)
        client.append(c)
        server.append(s)
    after = table_updates()
    w = args.window
    for name, figures in (("this process", client), ("server backend", server)):
        head = statistics.median(f[0] for f in figures)
        tail = statistics.median(f[1] for f in figures)
        print(
            f"K={args.large_k} CPU µs/step, {name}: steps 1-{w} {head:.0f}, "
            f"last {w} {tail:.0f} (x{tail / head:.2f}; median of {args.large_runs} runs)"
        )
    steps = args.large_k * args.large_runs
    for name in before:
        ins = after[name][0] - before[name][0]
        upd = after[name][1] - before[name][1]
        hot = after[name][2] - before[name][2]
        share = f"{hot / upd:.0%} HOT" if upd else "no updates"
        print(f"  {name}: {ins / steps:.2f} inserts, {upd / steps:.2f} updates per step ({share})")


if __name__ == "__main__":
    main()
