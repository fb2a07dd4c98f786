"""Inline-step throughput of pikku_workflows on PostgreSQL, beside DBOS 3.4 (prints, never asserts).

One workflow of K inline steps (`wf.do(f"s{i}", "bench.noop", {"i": i})`, a trivial step
function) run with `pw.start_workflow(name, inline=True)` at a small and a large K, and the same
shape on DBOS (a `@DBOS.workflow` calling K `@DBOS.step` functions) against the same
PostgreSQL server, the two engines alternating round by round (A/B/A/B) in one process.

Prints steps/s and ms per step at both K (the per-step cost should stay flat as K grows), the
ratio pikku ÷ DBOS, and the SQL round trips of one new inline step. See bench/README.md.

Each engine gets its own database, dropped and recreated at start (`pikku_bench`,
`dbos_bench` by default). DBOS is optional: installed only into the bench environment; when it
cannot be imported or launched, pikku's half still runs and the skip is printed with its reason.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PIKKU_WORKFLOW = "bench.inline"
PIKKU_STEP = "bench.noop"
QUERY_PROBE_K = 20  # steps in the run whose SQL is captured
FLAT_WINDOW = 100  # steps compared at the start and the end of a large run
SQL_WIDTH = 110

# Step functions of both engines call this: timestamps for the within-run flatness figure, and
# the captured-query index for the per-step SQL listing.
MARKS: list[float] = []
PROBE: Callable[[], None] | None = None


def mark() -> None:
    MARKS.append(time.perf_counter())
    if PROBE is not None:
        PROBE()


# --------------------------------------------------------------------------------------------
# Databases


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


# --------------------------------------------------------------------------------------------
# pikku_workflows


def setup_pikku(url: str) -> Callable[[int], float]:
    """Configure Django for `url`, migrate, register the bench workflow; return run(k) -> seconds."""
    sys.path.insert(0, str(ROOT))
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    # DEBUG would log every query in memory: a cost no production process pays.
    os.environ["DJANGO_DEBUG"] = "0"
    # The demo logs a line per run at INFO; DBOS logs nothing per workflow.
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)

    import pikku_workflows as pw

    @pw.step_function(PIKKU_STEP, inline=True)
    def noop(data: dict, ctx: Any) -> dict:
        mark()
        return {"i": data["i"]}

    @pw.workflow(PIKKU_WORKFLOW)
    def inline_bench(wf: Any, input: dict) -> dict:
        for i in range(input["k"]):
            wf.do(f"s{i}", PIKKU_STEP, {"i": i})
        return {"steps": input["k"]}

    def run(k: int) -> float:
        started = time.perf_counter()
        run_id = pw.start_workflow(PIKKU_WORKFLOW, {"k": k}, inline=True)
        elapsed = time.perf_counter() - started
        check_pikku_run(run_id, k)
        return elapsed

    return run


def check_pikku_run(run_id: str, k: int) -> None:
    from pikku_workflows.models import WorkflowRun

    run = WorkflowRun.objects.values("status", "output", "error").get(pk=run_id)
    if run["status"] != "completed" or run["output"] != {"steps": k}:
        raise SystemExit(f"pikku run {run_id} did not complete: {run}")


@dataclass
class QueryProfile:
    log: list[dict[str, str]]  # every captured entry of one run, in order
    marks: list[int]  # len(log) when the step function of step i was called

    @property
    def intervals(self) -> list[int]:
        return [b - a for a, b in itertools.pairwise(self.marks)]

    @property
    def per_step(self) -> list[dict[str, str]]:
        """Between two step-function calls: the previous step's result, then the next creation."""
        middle = len(self.marks) // 2
        return self.log[self.marks[middle - 1] : self.marks[middle]]

    @property
    def before_first_call(self) -> list[dict[str, str]]:
        return self.log[: self.marks[0]]

    @property
    def after_last_call(self) -> list[dict[str, str]]:
        return self.log[self.marks[-1] :]


def profile_pikku_queries(k: int) -> QueryProfile:
    """Capture every SQL statement of one inline run; slice out one step's worth."""
    global PROBE
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import pikku_workflows as pw

    marks: list[int] = []
    with CaptureQueriesContext(connection) as ctx:
        PROBE = lambda: marks.append(len(ctx.captured_queries))  # noqa: E731
        try:
            run_id = pw.start_workflow(PIKKU_WORKFLOW, {"k": k}, inline=True)
        finally:
            PROBE = None
    check_pikku_run(run_id, k)
    return QueryProfile(list(ctx.captured_queries), marks)


# --------------------------------------------------------------------------------------------
# DBOS


@dataclass
class DbosHandle:
    version: str
    run: Callable[[int], float]
    profile: Callable[[int], QueryProfile]
    shutdown: Callable[[], None]


def setup_dbos(url: str) -> DbosHandle:
    """Launch DBOS on `url` with the bench workflow; raises if it cannot be imported or launched."""
    from dbos import DBOS

    version = metadata.version("dbos")

    @DBOS.step()
    def dbos_noop(i: int) -> dict:
        mark()
        return {"i": i}

    @DBOS.workflow()
    def dbos_inline(k: int) -> dict:
        for i in range(k):
            dbos_noop(i)
        return {"steps": k}

    DBOS(config={"name": "pikku-bench", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()

    def run(k: int) -> float:
        started = time.perf_counter()
        output = dbos_inline(k)
        elapsed = time.perf_counter() - started
        if output != {"steps": k}:
            raise SystemExit(f"DBOS workflow returned {output!r}")
        return elapsed

    def profile(k: int) -> QueryProfile:
        return profile_dbos_queries(dbos_inline, k)

    return DbosHandle(version, run, profile, lambda: DBOS.destroy(destroy_registry=True))


def profile_dbos_queries(workflow: Callable[[int], Any], k: int) -> QueryProfile:
    """SQLAlchemy events on this thread: pool checkouts (pre-ping SELECT 1), BEGIN, SQL, COMMIT."""
    global PROBE
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import Pool

    me = threading.get_ident()
    log: list[dict[str, str]] = []

    def record(sql: str) -> None:
        if threading.get_ident() == me:
            log.append({"sql": sql})

    def on_checkout(*args: Any) -> None:
        record("(pool checkout: pre-ping SELECT 1)")

    def on_begin(conn: Any) -> None:
        record("BEGIN")

    def on_commit(conn: Any) -> None:
        record("COMMIT")

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        record(statement)

    hooks = [
        (Pool, "checkout", on_checkout),
        (Engine, "begin", on_begin),
        (Engine, "commit", on_commit),
        (Engine, "before_cursor_execute", on_execute),
    ]
    for target, name, fn in hooks:
        sa.event.listen(target, name, fn)
    marks: list[int] = []
    PROBE = lambda: marks.append(len(log))  # noqa: E731
    try:
        workflow(k)
    finally:
        PROBE = None
        for target, name, fn in hooks:
            sa.event.remove(target, name, fn)
    return QueryProfile(log, marks)


# --------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Series:
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # this process, all threads
    # Per run: (ms/step over the first FLAT_WINDOW steps, over the last FLAT_WINDOW steps).
    windows: list[tuple[float, float]] = field(default_factory=list)

    def add(self, seconds: float, k: int) -> None:
        self.seconds.append(seconds)
        if k >= 2 * FLAT_WINDOW + 1 and len(MARKS) == k:
            gaps = [b - a for a, b in itertools.pairwise(MARKS)]
            head = sum(gaps[:FLAT_WINDOW]) / FLAT_WINDOW * 1000
            tail = sum(gaps[-FLAT_WINDOW:]) / FLAT_WINDOW * 1000
            self.windows.append((head, tail))


def timed(run: Callable[[int], float], k: int, series: Series) -> None:
    MARKS.clear()
    cpu = time.process_time()
    seconds = run(k)
    series.cpu_seconds.append(time.process_time() - cpu)
    series.add(seconds, k)


@dataclass
class Scenario:
    k: int
    runs: int
    rounds: int


def measure(scenario: Scenario, engines: dict[str, Callable[[int], float]]) -> dict[str, Series]:
    """Alternate the engines round by round (A/B/A/B); each round runs a batch per engine."""
    results = {name: Series() for name in engines}
    per_round = [scenario.runs // scenario.rounds] * scenario.rounds
    for i in range(scenario.runs % scenario.rounds):
        per_round[i] += 1
    for batch in per_round:
        for name, run in engines.items():
            for _ in range(batch):
                timed(run, scenario.k, results[name])
    return results


# --------------------------------------------------------------------------------------------
# Printing


def figures(series: Series, k: int) -> dict[str, float]:
    total = sum(series.seconds)
    per_run_ms_step = [s / k * 1000 for s in series.seconds]
    return {
        "runs": len(series.seconds),
        "steps": k * len(series.seconds),
        "seconds": total,
        "steps_per_s": k * len(series.seconds) / total,
        "ms_per_step": total / (k * len(series.seconds)) * 1000,
        "median_ms_per_step": statistics.median(per_run_ms_step),
        "min_ms_per_step": min(per_run_ms_step),
        "max_ms_per_step": max(per_run_ms_step),
        "cpu_ms_per_step": sum(series.cpu_seconds) / (k * len(series.seconds)) * 1000,
    }


def print_table(results: dict[int, dict[str, dict[str, float]]]) -> None:
    header = (
        f"{'engine':<7} {'K':>5} {'runs':>5} {'steps':>6} {'total s':>8} {'steps/s':>9} "
        f"{'ms/step':>8} {'median':>8} {'min':>7} {'max':>7} {'cpu ms':>7}"
    )
    print(header)
    print("-" * len(header))
    for k, by_engine in results.items():
        for engine, f in by_engine.items():
            print(
                f"{engine:<7} {k:>5} {f['runs']:>5.0f} {f['steps']:>6.0f} {f['seconds']:>8.2f} "
                f"{f['steps_per_s']:>9.0f} {f['ms_per_step']:>8.3f} "
                f"{f['median_ms_per_step']:>8.3f} {f['min_ms_per_step']:>7.3f} "
                f"{f['max_ms_per_step']:>7.3f} {f['cpu_ms_per_step']:>7.3f}"
            )
    print("(ms/step = total time / total steps; median/min/max over runs; runs include start")
    print(" and completion of the workflow, so small K carries the per-run overhead; cpu ms =")
    print(" CPU time of this Python process per step, the database server's excluded.)")


def shorten(sql: str) -> str:
    sql = " ".join(sql.split())
    return sql if len(sql) <= SQL_WIDTH else sql[: SQL_WIDTH - 3] + "..."


def is_transaction_control(sql: str) -> bool:
    head = sql.split(None, 1)[0].upper() if sql.strip() else ""
    return head in {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"}


def print_profile(title: str, profile: QueryProfile, k: int, note: str) -> None:
    step = profile.per_step
    statements = [q for q in step if not is_transaction_control(q["sql"])]
    commits = sum(1 for q in step if q["sql"].strip().upper().startswith("COMMIT"))
    intervals = profile.intervals
    print(f"{title}: one run of K={k}: {len(profile.log)} entries captured in all")
    print(
        f"  per new step: {len(step)} round trips incl. transaction control "
        f"({len(statements)} SQL statements + {len(step) - len(statements)} "
        f"BEGIN/COMMIT/SAVEPOINT), {commits} commits"
    )
    print(f"  every step the same: {'yes' if len(set(intervals)) == 1 else f'no: {intervals}'}")
    print(f"  fixed per run (start, lease, completion): {len(profile.log) - k * len(step)} entries")
    print(f"  {note}")
    print_sql(step)
    before, after = profile.before_first_call, profile.after_last_call
    print(f"  before the first step function call ({len(before)}, step 1's own share included):")
    print_sql(before)
    print(f"  after the last step function call ({len(after)}, step {k}'s own share included):")
    print_sql(after)


def print_sql(entries: list[dict[str, str]]) -> None:
    for number, q in enumerate(entries, 1):
        print(f"    {number:>2}. {shorten(q['sql'])}")


def print_flatness(results: dict[int, dict[str, dict[str, float]]], series: dict) -> None:
    ks = sorted(results)
    small, large = ks[0], ks[-1]
    print()
    print(f"Per-step cost, K={small} vs K={large} (flat means the large-K cost does not grow):")
    for engine in results[large]:
        a = results[small][engine]["ms_per_step"]
        b = results[large][engine]["ms_per_step"]
        fixed = (a - b) * small
        fixed_text = f"≈ {fixed:.2f} ms" if fixed > 0 else "not resolvable (noise)"
        print(
            f"  {engine:<6} {a:.3f} ms/step at K={small}, {b:.3f} ms/step at K={large} "
            f"(x{b / a:.2f}); per-run fixed cost {fixed_text}"
        )
        windows = series[large][engine].windows
        if windows:
            head = statistics.mean(w[0] for w in windows)
            tail = statistics.mean(w[1] for w in windows)
            print(
                f"         within a K={large} run: steps 1-{FLAT_WINDOW} {head:.3f} ms/step, "
                f"last {FLAT_WINDOW} {tail:.3f} ms/step (x{tail / head:.2f})"
            )


# --------------------------------------------------------------------------------------------


def load_average() -> str:
    cores = os.cpu_count() or 1
    one, five, _ = os.getloadavg()
    busy = "  (busy machine: absolute figures are noisy, the interleaved ratio less so)"
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {cores} cores" + (
        busy if one > cores / 2 else ""
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL without a database (default: %(default)s)",
    )
    parser.add_argument("--pikku-db", default="pikku_bench")
    parser.add_argument("--dbos-db", default="dbos_bench")
    parser.add_argument("--small-k", type=int, default=10)
    parser.add_argument("--small-runs", type=int, default=50)
    parser.add_argument("--large-k", type=int, default=1000)
    parser.add_argument("--large-runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="A/B rounds per K (max: runs)")
    parser.add_argument("--no-dbos", action="store_true", help="run pikku's half only")
    parser.add_argument(
        "--otel", action="store_true", help="pikku traces its work (in-memory span exporter)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    pikku_url = database_url(args.server, args.pikku_db)
    dbos_url = database_url(args.server, args.dbos_db)
    print(f"python {sys.version.split()[0]} · {sys.executable}")
    print(f"load average at start: {load_average()}")
    print(f"pikku_workflows on {pikku_url} (recreated)")
    if args.otel:
        sys.path.insert(0, str(ROOT))
        from bench.otel import install_in_memory_exporter

        install_in_memory_exporter()
        print(
            "tracing: engine `otel` is pikku with OTEL on (in-memory span exporter), "
            "alternating with `pikku` (OTEL off)"
        )
    recreate_database(args.server, args.pikku_db)
    run_pikku = setup_pikku(pikku_url)
    import django
    import psycopg
    from django.db import connection

    print(
        f"django {django.__version__} · psycopg {psycopg.__version__} · "
        f"PostgreSQL {connection.cursor().connection.info.server_version}"
    )

    dbos: DbosHandle | None = None
    skipped = "--no-dbos given" if args.no_dbos else ""
    if not args.no_dbos:
        try:
            import dbos as _dbos  # noqa: F401
        except ImportError as exc:
            skipped = (
                f"the dbos package is not importable here ({exc}); install it into the bench "
                "environment only: .venv-bench/bin/pip install -e . 'dbos~=3.4.0'"
            )
        else:
            try:
                recreate_database(args.server, args.dbos_db)
                dbos = setup_dbos(dbos_url)
            except Exception as exc:
                traceback.print_exc()
                skipped = f"DBOS could not be launched: {type(exc).__name__}: {exc}"
    if dbos is not None:
        note = "" if dbos.version.startswith("3.4.") else " (NOT 3.4.x: figures not comparable)"
        print(f"DBOS {dbos.version}{note} on {dbos_url} (recreated)")
    else:
        print(f"DBOS half SKIPPED: {skipped}")

    engines: dict[str, Callable[[int], float]] = {"pikku": run_pikku}
    if args.otel:
        from bench.otel import traced

        engines["otel"] = traced(run_pikku)
    if dbos is not None:
        engines["dbos"] = dbos.run

    try:
        # Warm-up (not counted): connections, caches, first inserts into fresh tables.
        for run in engines.values():
            for _ in range(3):
                run(args.small_k)
            run(min(args.large_k, 100))
        MARKS.clear()

        scenarios = [
            Scenario(args.small_k, args.small_runs, min(args.rounds, args.small_runs)),
            Scenario(args.large_k, args.large_runs, min(args.rounds, args.large_runs)),
        ]
        series: dict[int, dict[str, Series]] = {}
        results: dict[int, dict[str, dict[str, float]]] = {}
        for scenario in scenarios:
            print(
                f"\nK={scenario.k}: {scenario.runs} runs per engine in {scenario.rounds} "
                f"interleaved rounds ({' / '.join(engines) + (' alternating' if len(engines) > 1 else ' only')})...",
                flush=True,
            )
            series[scenario.k] = measure(scenario, engines)
            results[scenario.k] = {
                name: figures(s, scenario.k) for name, s in series[scenario.k].items()
            }

        print()
        print_table(results)
        print_flatness(results, series)

        print(f"load average after timing: {load_average()}")
        if args.otel:
            from bench.otel import spans_exported

            print(f"spans exported by `otel` (in memory): {spans_exported()}")
            print("Tracing's cost, `otel` steps/s ÷ `pikku` steps/s (interleaved):")
            for k, by_engine in results.items():
                ratio = by_engine["otel"]["steps_per_s"] / by_engine["pikku"]["steps_per_s"]
                print(f"  K={k:<5} {ratio:.3f} ({(1 - ratio) * 100:+.1f} % cost)")
        print()
        if dbos is not None:
            print("Ratio pikku steps/s ÷ DBOS steps/s:")
            for k, by_engine in results.items():
                ratio = by_engine["pikku"]["steps_per_s"] / by_engine["dbos"]["steps_per_s"]
                print(f"  K={k:<5} {ratio:.2f}x")
        else:
            print(f"Ratio pikku ÷ DBOS: not measured (DBOS half skipped: {skipped})")

        print()
        print_profile(
            "pikku SQL (django CaptureQueriesContext)",
            profile_pikku_queries(QUERY_PROBE_K),
            QUERY_PROBE_K,
            "BEGIN and COMMIT are captured (Django logs them; psycopg sends BEGIN before the "
            "first statement of a transaction), SAVEPOINTs too (none expected); "
            "one step's cycle = the previous step's result, then this step's creation (row + history, running):",
        )
        if dbos is not None:
            print()
            print_profile(
                "DBOS SQL (SQLAlchemy events, this thread)",
                dbos.profile(QUERY_PROBE_K),
                QUERY_PROBE_K,
                "pool checkouts are listed because DBOS's engine uses pool_pre_ping (one "
                "SELECT 1 round trip per checkout, invisible to cursor events):",
            )
    finally:
        if dbos is not None:
            dbos.shutdown()


if __name__ == "__main__":
    main()
