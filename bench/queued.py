"""Queued-step throughput of pikku_workflows on PostgreSQL, beside DBOS 3.4 (prints, never asserts).

N workflows x K steps submitted at once by this process to 1, 2 and 4 worker processes, the
two engines alternating round by round in one run, each against its own database on the same
server. pikku: `manage.py pikku_worker --workers W` running `bench.queued_workflows` (every
step a step function registered `inline=False`: one queue message per step). DBOS: W
processes that each `DBOS.launch()` with the bench queue registered; the client enqueues the
workflows with `DBOSClient` and each runs its K `@DBOS.step`s in the process that dequeued it.

Prints steps/s, enqueue→start latency p50/p95, server-side transactions and round trips per
step, the ratios, the per-step cost of one sequential run at K=10, 100, 1000 (replay
growth), and fairness: the p95 completion time of 50 ten-step runs alone and behind one
2,000-step run started first, on 2 worker processes. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PIKKU_MODULE = "bench.queued_workflows"
DBOS_APP = "pikku-bench-queued"
DBOS_QUEUE = "bench"
DBOS_VERSION_TAG = "bench"
DBOS_POLL_SECONDS = 0.1  # django-q2's `poll` in the recommended Q_CLUSTER is 0.1 s too
POLL_SECONDS = 0.25  # how often this process checks for completion (not counted, see below)
POSTGRES_LOG = Path("/var/log/postgresql/postgresql-15-main.log")
READY_TIMEOUT = 60
ROUND_TIMEOUT = 600


# --------------------------------------------------------------------------------------------
# Databases and server-side counters


def database_url(server: str, name: str) -> str:
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


def admin(server: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def recreate_database(server: str, name: str) -> None:
    admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')


def committed_transactions(server: str, name: str) -> int:
    import psycopg

    with psycopg.connect(database_url(server, "postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return int(row[0]) if row else 0


class Watcher:
    """This process's own connection to a bench database for polling: its statements are not
    logged (superuser `SET log_statement`), and its transactions are counted so they can be
    subtracted from the database's `xact_commit`."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("SET log_statement = 'none'")
        self.transactions = 1

    def scalar(self, sql: str, params: list[Any]) -> Any:
        self.transactions += 1
        row = self.conn.execute(sql, params).fetchone()
        return row[0] if row else None

    def rows(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        self.transactions += 1
        return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self.conn.close()


class StatementLog:
    """Counts round trips on the server: statements logged with `log_statement = 'all'` (set on
    the bench database only, for the counting round only) in the server's log file."""

    def __init__(self, server: str, name: str) -> None:
        self.server, self.name = server, name
        self.offset = 0

    @staticmethod
    def available() -> str | None:
        if not POSTGRES_LOG.exists() or not os.access(POSTGRES_LOG, os.R_OK):
            return f"the server log {POSTGRES_LOG} is not readable here"
        return None

    def __enter__(self) -> StatementLog:
        admin(self.server, f"ALTER DATABASE \"{self.name}\" SET log_statement = 'all'")
        self.offset = POSTGRES_LOG.stat().st_size
        return self

    def __exit__(self, *exc: Any) -> None:
        admin(self.server, f'ALTER DATABASE "{self.name}" RESET log_statement')

    def count(self) -> int:
        pattern = re.compile(rf" \S+@{re.escape(self.name)} LOG:  (statement|execute [^:]*):")
        with POSTGRES_LOG.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
        return sum(1 for line in text.splitlines() if pattern.search(line))


# --------------------------------------------------------------------------------------------
# pikku_workflows


def setup_pikku(url: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ["DJANGO_DEBUG"] = "0"  # DEBUG would keep every query in memory
    # With DEBUG off the demo project refuses its development key; workers inherit this one.
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + "k" * 40)
    os.environ["PIKKU_EXTRA_WORKFLOW_MODULES"] = PIKKU_MODULE
    # The demo logs a line per run at INFO; DBOS logs nothing per workflow. Workers inherit it.
    os.environ.setdefault("PIKKU_LOG", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def start_pikku_workers(
    url: str, workers: int, log: Path, module: str = PIKKU_MODULE
) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PIKKU_EXTRA_WORKFLOW_MODULES": module,
        "DJANGO_DEBUG": "0",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("Q_CLUSTER_NAME", None)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "pikku_worker", "--workers", str(workers)],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_for_line(process, log, "pikku_worker: cluster")
    return [process]


def submit_pikku(n: int, k: int) -> list[str]:
    import pikku_workflows as pw
    from bench.queued_workflows import WORKFLOW

    return [pw.start_workflow(WORKFLOW, {"k": k}) for _ in range(n)]


def close_pikku_connections() -> None:
    from django.db import connections

    connections.close_all()


PIKKU_UNFINISHED = (
    "SELECT count(*) FROM pikku_workflows_workflowrun WHERE id::text = ANY(%s) "
    "AND status NOT IN ('completed', 'failed', 'cancelled')"
)
PIKKU_FAILED = (
    "SELECT count(*) FROM pikku_workflows_workflowrun WHERE id::text = ANY(%s) "
    "AND status <> 'completed'"
)
PIKKU_SPAN = (
    "SELECT extract(epoch FROM max(finished_at) - min(created_at)) "
    "FROM pikku_workflows_workflowrun WHERE id::text = ANY(%s)"
)
# Enqueue → start: the run's first message (created) → its first step function call (running);
# a step's message is sent right after its row is created (pending), so step latency is
# history.created_at → history.running_at of attempt 1.
PIKKU_RUN_LATENCY = """
    SELECT extract(epoch FROM min(h.running_at) - r.created_at) * 1000
    FROM pikku_workflows_workflowrun r
    JOIN pikku_workflows_workflowstep s ON s.run_id = r.id
    JOIN pikku_workflows_workflowstephistory h ON h.step_id = s.id
    WHERE r.id::text = ANY(%s) GROUP BY r.id
"""
PIKKU_COMPLETION_MS = (
    "SELECT extract(epoch FROM finished_at - created_at) * 1000 "
    "FROM pikku_workflows_workflowrun WHERE id::text = ANY(%s)"
)
PIKKU_STEP_LATENCY = """
    SELECT extract(epoch FROM h.running_at - h.created_at) * 1000
    FROM pikku_workflows_workflowstephistory h
    JOIN pikku_workflows_workflowstep s ON s.id = h.step_id
    WHERE s.run_id::text = ANY(%s) AND h.attempt = 1 AND h.running_at IS NOT NULL
"""


# --------------------------------------------------------------------------------------------
# DBOS


def dbos_worker(url: str, index: str) -> None:
    """A DBOS worker process: the bench workflow and queue, launched, until SIGTERM."""
    from dbos import DBOS

    @DBOS.step()
    def noop(i: int) -> dict:
        return {"i": i}

    @DBOS.workflow(name="bench_queued")
    def bench_queued(k: int) -> dict:
        for i in range(k):
            noop(i)
        return {"steps": k}

    DBOS(
        config={
            "name": DBOS_APP,
            "system_database_url": url,
            "log_level": "WARNING",
            # Distinct executors: a launching process must not "recover" its peers' workflows.
            "executor_id": f"bench-worker-{index}",
            "application_version": DBOS_VERSION_TAG,
        }
    )
    DBOS.launch()
    DBOS.register_queue(DBOS_QUEUE, polling_interval_sec=DBOS_POLL_SECONDS)
    print("dbos worker ready", flush=True)
    signal.sigwait([signal.SIGTERM, signal.SIGINT])
    DBOS.destroy()


def start_dbos_workers(url: str, workers: int, log: Path) -> list[subprocess.Popen]:
    processes = []
    for index in range(workers):
        # One at a time: the first one migrates the system database.
        path = log.with_name(f"{log.stem}-{index}.log")
        process = subprocess.Popen(
            [sys.executable, __file__, "--dbos-worker", url, str(index)],
            stdout=path.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        processes.append(process)
        wait_for_line(process, path, "dbos worker ready")
    return processes


DBOS_UNFINISHED = (
    "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) "
    "AND status NOT IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')"
)
DBOS_FAILED = (
    "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) "
    "AND status <> 'SUCCESS'"
)
DBOS_SPAN = (
    "SELECT (max(updated_at) - min(created_at)) / 1000.0 FROM dbos.workflow_status "
    "WHERE workflow_uuid = ANY(%s)"
)
DBOS_COMPLETION_MS = (
    "SELECT updated_at - created_at FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)"
)
DBOS_RUN_LATENCY = """
    SELECT min(o.started_at_epoch_ms) - w.created_at
    FROM dbos.workflow_status w JOIN dbos.operation_outputs o USING (workflow_uuid)
    WHERE w.workflow_uuid = ANY(%s) GROUP BY w.workflow_uuid, w.created_at
"""


# --------------------------------------------------------------------------------------------
# One round


def wait_for_line(process: subprocess.Popen, log: Path, text: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker did not start ({log}):\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers of the process group


@dataclass
class Engine:
    name: str
    server: str
    database: str
    start_workers: Callable[[str, int, Path], list[subprocess.Popen]]
    submit: Callable[[int, int], list[str]]
    after_submit: Callable[[], None]
    unfinished: str
    failed: str
    span: str
    run_latency: str
    step_latency: str | None
    completion_ms: str

    @property
    def url(self) -> str:
        return database_url(self.server, self.database)


@dataclass
class Round:
    engine: str
    workers: int
    n: int
    k: int
    seconds: float
    run_latency_ms: list[float]
    step_latency_ms: list[float]
    transactions: int
    round_trips: int | None

    @property
    def steps(self) -> int:
        return self.n * self.k


def run_round(
    engine: Engine,
    workers: int,
    n: int,
    k: int,
    workdir: Path,
    count_statements: bool = False,
    warm_up: bool = False,
) -> Round:
    """`warm_up`: one short run first, not counted, so that the timed runs meet workers past
    their first message (connections, statement preparation, first imports)."""
    log = workdir / f"{engine.name}-w{workers}-{time.monotonic_ns()}.log"
    statements = StatementLog(engine.server, engine.database)
    with statements if count_statements else contextlib.nullcontext():
        processes = engine.start_workers(engine.url, workers, log)
        watcher = Watcher(engine.url)
        try:
            if warm_up:
                wait_finished(engine, watcher, engine.submit(1, 2))
            before = committed_transactions(engine.server, engine.database)
            ids = engine.submit(n, k)
            wait_finished(engine, watcher, ids)
        finally:
            stop(processes)
        if failed := watcher.scalar(engine.failed, [ids]):
            raise RuntimeError(f"{engine.name}: {failed} of {n} runs did not succeed")
        seconds = float(watcher.scalar(engine.span, [ids]))
        run_latency = [float(r[0]) for r in watcher.rows(engine.run_latency, [ids])]
        step_latency = (
            [float(r[0]) for r in watcher.rows(engine.step_latency, [ids])]
            if engine.step_latency
            else []
        )
        mine = watcher.transactions
        watcher.close()
        time.sleep(0.5)  # closed backends flush their statistics as they exit
        transactions = committed_transactions(engine.server, engine.database) - before - mine
        round_trips = statements.count() if count_statements else None
    return Round(
        engine.name, workers, n, k, seconds, run_latency, step_latency, transactions, round_trips
    )


def wait_finished(engine: Engine, watcher: Watcher, ids: list[str]) -> None:
    engine.after_submit()
    deadline = time.monotonic() + ROUND_TIMEOUT
    while watcher.scalar(engine.unfinished, [ids]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{engine.name}: runs unfinished after {ROUND_TIMEOUT} s")
        time.sleep(POLL_SECONDS)


def fairness_p95(
    engine: Engine, workdir: Path, long_k: int | None, short_n: int, short_k: int
) -> float:
    """The p95 completion time (ms) of `short_n` runs of `short_k` steps on 2 worker
    processes, submitted once a run of `long_k` steps (when given) has started."""
    log = workdir / f"{engine.name}-fair-{time.monotonic_ns()}.log"
    processes = engine.start_workers(engine.url, 2, log)
    watcher = Watcher(engine.url)
    try:
        long_ids = engine.submit(1, long_k) if long_k else []
        engine.after_submit()
        if long_ids:
            time.sleep(0.5)  # the long run is under way before the short ones arrive
        short_ids = engine.submit(short_n, short_k)
        wait_finished(engine, watcher, short_ids + long_ids)
        completions = [float(row[0]) for row in watcher.rows(engine.completion_ms, [short_ids])]
    finally:
        stop(processes)
        watcher.close()
    return percentile(completions, 0.95)


# --------------------------------------------------------------------------------------------
# Printing


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(rounds: list[Round]) -> dict[str, float]:
    steps = sum(r.steps for r in rounds)
    seconds = sum(r.seconds for r in rounds)
    run_latency = [v for r in rounds for v in r.run_latency_ms]
    step_latency = [v for r in rounds for v in r.step_latency_ms]
    return {
        "rounds": len(rounds),
        "steps_per_s": steps / seconds,
        "per_round": [r.steps / r.seconds for r in rounds],  # type: ignore[dict-item]
        "run_p50": percentile(run_latency, 0.5),
        "run_p95": percentile(run_latency, 0.95),
        "step_p50": percentile(step_latency, 0.5),
        "step_p95": percentile(step_latency, 0.95),
        "transactions": sum(r.transactions for r in rounds) / steps,
    }


def print_throughput(results: dict[int, dict[str, list[Round]]]) -> None:
    header = (
        f"{'engine':<6} {'workers':>7} {'rounds':>6} {'steps/s':>8} {'(per round)':<20} "
        f"{'wf enq→start p50/p95 ms':>24} {'step enq→start p50/p95 ms':>26} {'xact/step':>9}"
    )
    print(header)
    print("-" * len(header))
    for workers, by_engine in results.items():
        for name, rounds in by_engine.items():
            f = summarize(rounds)
            per_round = " ".join(f"{v:.0f}" for v in f["per_round"])  # type: ignore[attr-defined]
            step = (
                f"{f['step_p50']:>11.1f} / {f['step_p95']:<10.1f}"
                if f["step_p50"] == f["step_p50"]
                else f"{'n/a (steps run in place)':>24}"
            )
            print(
                f"{name:<6} {workers:>7} {f['rounds']:>6.0f} {f['steps_per_s']:>8.0f} "
                f"{'(' + per_round + ')':<20} {f['run_p50']:>11.1f} / {f['run_p95']:<10.1f} "
                f"{step:>26} {f['transactions']:>9.2f}"
            )


def print_ratios(results: dict[int, dict[str, list[Round]]]) -> None:
    print("Ratio pikku steps/s ÷ DBOS steps/s (same run, interleaved):")
    for workers, by_engine in results.items():
        if "pikku" in by_engine and "dbos" in by_engine:
            ratio = (
                summarize(by_engine["pikku"])["steps_per_s"]
                / summarize(by_engine["dbos"])["steps_per_s"]
            )
            print(f"  {workers} worker process{'es' if workers > 1 else ''}: {ratio:.2f}x")


def load_average() -> str:
    cores = os.cpu_count() or 1
    one, five, _ = os.getloadavg()
    busy = "  (busy machine: absolute figures are noisy)" if one > cores / 2 else ""
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {cores} cores{busy}"


# --------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL without a database (default: %(default)s)",
    )
    parser.add_argument("--pikku-db", default="pikku_queued_bench")
    parser.add_argument("--dbos-db", default="dbos_queued_bench")
    parser.add_argument("-n", "--workflows", type=int, default=200)
    parser.add_argument("-k", "--steps", type=int, default=10)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per count")
    parser.add_argument("--count-n", type=int, default=50, help="workflows in the counting round")
    parser.add_argument("--growth-ks", default="10,100,1000", help="K of the sequential runs")
    parser.add_argument("--fairness-long-k", type=int, default=2000, help="0: no fairness mode")
    parser.add_argument("--no-dbos", action="store_true", help="run pikku's half only")
    parser.add_argument(
        "--otel", action="store_true", help="pikku traces its work (in-memory span exporter)"
    )
    parser.add_argument("--dbos-worker", nargs=2, metavar=("URL", "INDEX"), help=argparse.SUPPRESS)
    return parser.parse_args()


def setup_dbos(args: argparse.Namespace) -> tuple[Engine | None, str]:
    if args.no_dbos:
        return None, "--no-dbos given"
    try:
        from dbos import DBOSClient
    except ImportError as exc:
        return None, (
            f"the dbos package is not importable here ({exc}); install it into the bench "
            "environment only: .venv-bench/bin/pip install -e . 'dbos~=3.4.0'"
        )
    recreate_database(args.server, args.dbos_db)
    url = database_url(args.server, args.dbos_db)
    clients: list[Any] = []

    def submit(n: int, k: int) -> list[str]:
        client = DBOSClient(system_database_url=url, application_name=DBOS_APP)
        clients.append(client)
        options = {
            "queue_name": DBOS_QUEUE,
            "workflow_name": "bench_queued",
            "app_version": DBOS_VERSION_TAG,
        }
        return [client.enqueue(options, k).workflow_id for _ in range(n)]  # type: ignore[arg-type]

    def after_submit() -> None:
        while clients:
            clients.pop().destroy()  # its connections close: their statistics are flushed

    engine = Engine(
        "dbos",
        args.server,
        args.dbos_db,
        start_dbos_workers,
        submit,
        after_submit,
        DBOS_UNFINISHED,
        DBOS_FAILED,
        DBOS_SPAN,
        DBOS_RUN_LATENCY,
        None,
        DBOS_COMPLETION_MS,
    )
    return engine, ""


def main() -> None:
    args = parse_args()
    if args.dbos_worker:
        dbos_worker(*args.dbos_worker)
        return
    workers_list = [int(w) for w in args.workers.split(",") if w]
    print(f"python {sys.version.split()[0]} · {sys.executable}")
    print(f"load average at start: {load_average()}")
    if args.otel:
        sys.path.insert(0, str(ROOT))
        from bench.otel import switch_tracing_on

        switch_tracing_on()
    print(f"tracing: {'on (in-memory span exporter)' if args.otel else 'off'}")
    recreate_database(args.server, args.pikku_db)
    setup_pikku(database_url(args.server, args.pikku_db))
    import django
    from django.conf import settings

    broker = settings.Q_CLUSTER.get("broker_class") or "django-q2 ORM broker (stock)"
    print(f"django {django.__version__} · pikku_workflows on {args.pikku_db} · broker: {broker}")
    pikku = Engine(
        "pikku",
        args.server,
        args.pikku_db,
        start_pikku_workers,
        submit_pikku,
        close_pikku_connections,
        PIKKU_UNFINISHED,
        PIKKU_FAILED,
        PIKKU_SPAN,
        PIKKU_RUN_LATENCY,
        PIKKU_STEP_LATENCY,
        PIKKU_COMPLETION_MS,
    )
    dbos, skipped = None, ""
    try:
        dbos, skipped = setup_dbos(args)
    except Exception as exc:
        traceback.print_exc()
        skipped = f"DBOS could not be set up: {type(exc).__name__}: {exc}"
    if dbos:
        version = metadata.version("dbos")
        note = "" if version.startswith("3.4.") else " (NOT 3.4.x: figures not comparable)"
        print(f"DBOS {version}{note} on {args.dbos_db}")
    else:
        print(f"DBOS half SKIPPED: {skipped}")
    engines = [pikku] + ([dbos] if dbos else [])

    with tempfile.TemporaryDirectory(prefix="pikku-queued-bench-") as tmp:
        workdir = Path(tmp)
        # Warm-up (not counted): imports, fresh tables, the DBOS system database migration.
        for engine in engines:
            run_round(engine, 1, 5, 2, workdir)

        results: dict[int, dict[str, list[Round]]] = {}
        for workers in workers_list:
            results[workers] = {engine.name: [] for engine in engines}
            for index in range(args.rounds):
                # Alternate who goes first, so neither engine always gets the cooler machine.
                order = engines if index % 2 == 0 else engines[::-1]
                for engine in order:
                    print(
                        f"  {engine.name}: {workers} worker process(es), N={args.workflows} "
                        f"K={args.steps}, round {index + 1}/{args.rounds}...",
                        flush=True,
                    )
                    results[workers][engine.name].append(
                        run_round(engine, workers, args.workflows, args.steps, workdir)
                    )
        print(f"load average after the timed rounds: {load_average()}")

        counting: dict[str, Round] = {}
        why_not = StatementLog.available()
        if why_not is None:
            for engine in engines:
                counting[engine.name] = run_round(
                    engine, 2, args.count_n, args.steps, workdir, count_statements=True
                )

        growth: dict[int, dict[str, Round]] = {}
        for k in [int(x) for x in args.growth_ks.split(",") if x]:
            growth[k] = {}
            for engine in engines:
                print(f"  {engine.name}: one run of K={k}, 1 worker process...", flush=True)
                growth[k][engine.name] = run_round(engine, 1, 1, k, workdir, warm_up=True)

        fair: dict[str, tuple[float, float]] = {}
        if args.fairness_long_k:
            for engine in engines:
                print(f"  {engine.name}: fairness, 50 x 10 alone, then behind one long run...")
                alone = fairness_p95(engine, workdir, None, 50, 10)
                behind = fairness_p95(engine, workdir, args.fairness_long_k, 50, 10)
                fair[engine.name] = (alone, behind)

    print()
    print(f"Throughput: N={args.workflows} workflows x K={args.steps} steps, submitted at once")
    print_throughput(results)
    print(
        "(steps/s = NxK ÷ (last workflow finished - first workflow enqueued), database clock;\n"
        " wf enq→start = workflow enqueued → its first step function starts; step enq→start =\n"
        " a queued step's message sent → its step function starts (pikku only: a DBOS step runs\n"
        " in the process that runs its workflow, it is never enqueued); xact/step =\n"
        " pg_stat_database.xact_commit of the bench database ÷ steps, client and workers,\n"
        " read-only autocommit statements included, this process's polling excluded.)"
    )
    print()
    if dbos:
        print_ratios(results)
    else:
        print(f"Ratio pikku ÷ DBOS: not measured (DBOS half skipped: {skipped})")
    print()
    if counting:
        print(
            f"Round trips per step, counted on the server (log_statement = 'all' on the bench "
            f"database, a separate untimed round of N={args.count_n} x K={args.steps}, "
            "2 worker processes; every logged statement, BEGIN/COMMIT included, is one round "
            "trip; client and workers; this process's polling excluded):"
        )
        for name, r in counting.items():
            print(
                f"  {name:<6} {r.round_trips / r.steps:6.2f} round trips/step, "
                f"{r.transactions / r.steps:5.2f} transactions/step"
            )
        if len(counting) == 2:
            p, d = counting["pikku"], counting["dbos"]
            print(
                f"  ratio pikku ÷ DBOS: round trips {p.round_trips / d.round_trips:.2f}x, "
                f"transactions {p.transactions / d.transactions:.2f}x"
            )
    else:
        print(f"Round trips: not counted ({why_not}); transactions are in the table above.")
    print()
    print("One workflow of K sequential steps on 1 worker process, after one warm-up run there:")
    for k, by_engine in growth.items():
        line = ", ".join(
            f"{name} {r.seconds:7.2f} s = {r.seconds / k * 1000:6.2f} ms/step"
            for name, r in by_engine.items()
        )
        print(f"  K={k:<5} {line}")
    if fair:
        print()
        print(
            f"Fairness: p95 completion of 50 runs x 10 steps on 2 worker processes, alone and "
            f"behind one run of {args.fairness_long_k} steps started first:"
        )
        for name, (alone, behind) in fair.items():
            print(
                f"  {name:<6} alone {alone:8.0f} ms, behind the long run {behind:8.0f} ms "
                f"({behind / alone:.2f}x)"
            )
    print(f"load average at the end: {load_average()}")


if __name__ == "__main__":
    main()
