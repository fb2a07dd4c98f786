"""Live event streams under load, against a real server (prints, never asserts): how many
database connections S open `GET runs/{id}/events/` streams hold, how `GET runs/` answers
beside them, how soon a change reaches its stream, and what the streams cap answers.

For each server (`runserver`, the WSGI server `manage.py demo_server` runs, and uvicorn on
`project/asgi.py`), in a subprocess of its own on the bench database:

1. `GET runs/?page_size=50` timed alone (median, p95, max) and the server's connections counted
   in `pg_stat_activity`;
2. S streams opened at once, each on a run of its own that is `running` and does not change, then
   connections sampled for a few seconds (max and median) while the streams stay open;
3. `GET runs/` timed again beside the streams;
4. one watched run changed at a time (an audit row written beside the server, as an operator
   action writes it): the time until its stream sends the timeline event;
5. a few more streams than `MAX_EVENT_STREAMS` allows: their status and `Retry-After`;
6. the streams closed, `GET runs/` timed alone once more: the figure to read is the median
   beside the streams over the mean of the medians alone before and after (a busy machine
   drifts; the two alone phases bracket it).

`--source DIR` runs the server from another checkout (its `manage.py`, settings and package), to
measure a version before a change with the same bench. The database (`pikku_streams_bench` by
default) is dropped and recreated; the server gets `PIKKU_MAX_EVENT_STREAMS` = S, so that S
streams fit under the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
API = "/api/workflows/"
RUNS = 2_000
STEPS_PER_RUN = 5
WORKFLOW = "bench.streams_order"
SERVERS = ("wsgi", "asgi")

sys.path.insert(0, str(ROOT))
from bench.api import recreate_database, setup_django  # noqa: E402 - the bench's own database

CONNECTING = 10


def fill_table(streams: int) -> tuple[str, list[str]]:
    """RUNS runs of a few steps (bulk inserts: the bench measures reads), the newest `streams` of
    them `running` with a step waiting on a signal; returns a token and those runs' ids."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory

    owner = get_user_model().objects.create_superuser("bench", password="bench")
    now = timezone.now()
    runs = [
        WorkflowRun(
            workflow=WORKFLOW,
            status="running" if index < streams else "completed",
            input={"order": index},
            started_by=owner,
            planned_steps=[f"s{i}" for i in range(STEPS_PER_RUN)],
            created_at=now - timedelta(seconds=index),
        )
        for index in range(RUNS)
    ]
    WorkflowRun.objects.bulk_create(runs, batch_size=2000)
    steps = [
        WorkflowStep(
            run=run,
            step_key=f"s{i}",
            function_name="bench.step",
            status="waiting" if run.status == "running" and i == STEPS_PER_RUN - 1 else "succeeded",
            result={"i": i},
        )
        for run in runs
        for i in range(STEPS_PER_RUN)
    ]
    WorkflowStep.objects.bulk_create(steps, batch_size=5000)
    WorkflowStepHistory.objects.bulk_create(
        [
            WorkflowStepHistory(
                step=step, attempt=1, status=step.status, created_at=now, running_at=now
            )
            for step in steps
        ],
        batch_size=5000,
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    token = Token.objects.create(user=owner).key
    return token, [str(run.pk) for run in runs[:streams]]


def server_command(kind: str, source: Path, port: int) -> list[str]:
    if kind == "wsgi":
        return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "project.asgi:application",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]


def start_server(kind: str, source: Path, port: int, url: str, cap: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "bench-only-" + uuid.uuid4().hex,
        "PIKKU_MAX_EVENT_STREAMS": str(cap),
        "PIKKU_LOG": "WARNING",
        "PYTHONPATH": str(source),
    }
    server = subprocess.Popen(
        server_command(kind, source, port),
        cwd=source,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("HEAD", API)
            return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"the {kind} server did not start on port {port}")


class Database:
    """The bench's own connection: counts the server's connections, changes watched runs."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.name = urlsplit(url).path.lstrip("/")

    def server_connections(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [self.name],
        ).fetchone()
        return int(row[0]) if row else 0

    def touch(self, run_id: str) -> None:
        """What an operator action writes: one audit row (the run's timeline shows it)."""
        self.conn.execute(
            "INSERT INTO pikku_workflows_workflowauditentry "
            "(run_id, action, reason, payload, created_at) "
            "VALUES (%s, 'resume', 'bench', '{}'::jsonb, clock_timestamp())",
            [uuid.UUID(run_id)],
        )


def timed_list(port: int, token: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        started = time.perf_counter()
        connection.request(
            "GET", API + "runs/?page_size=50", headers={"Authorization": f"Token {token}"}
        )
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - started)
        connection.close()
        if response.status != 200:
            raise SystemExit(f"GET runs/ answered {response.status}: the server is starved")
    return latencies


class Streams:
    """S streams read on an event loop in a thread of their own: each one's status, when its
    summary came, and when each later timeline event came."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.summaries: dict[str, float] = {}
        self.events: dict[str, list[float]] = {}
        self.statuses: dict[str, tuple[int, str | None]] = {}
        self.writers: list[asyncio.StreamWriter] = []

    def open(self, run_ids: list[str], timeout: float = 120) -> None:
        # At most CONNECTING at once: runserver listens with a backlog of 10, and connections
        # beyond it wait for TCP's retransmissions (seconds), which would measure nothing of ours.
        connecting = asyncio.Semaphore(CONNECTING)
        for run_id in run_ids:
            asyncio.run_coroutine_threadsafe(self._follow(run_id, connecting), self.loop)
        deadline = time.monotonic() + timeout
        while len(self.statuses) < len(run_ids) and time.monotonic() < deadline:
            time.sleep(0.05)

    async def _follow(self, run_id: str, connecting: asyncio.Semaphore) -> None:
        async with connecting:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writers.append(writer)
            writer.write(
                f"GET {API}runs/{run_id}/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Accept: text/event-stream\r\nAuthorization: Token {self.token}\r\n\r\n".encode()
            )
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            retry_after = None
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "retry-after":
                    retry_after = value.strip()
            self.statuses[run_id] = (status, retry_after)
        if status != 200:
            writer.close()
            return
        self.events[run_id] = []
        while line := await reader.readline():
            if line.startswith(b"event: summary"):
                self.summaries[run_id] = time.monotonic()
            elif line.startswith(b"event: timeline"):
                self.events[run_id].append(time.monotonic())

    def close(self) -> None:
        for writer in self.writers:
            self.loop.call_soon_threadsafe(writer.close)
        time.sleep(0.5)
        self.loop.call_soon_threadsafe(self.loop.stop)


def figures(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms"
    )


def sample_connections(database: Database, seconds: float) -> list[int]:
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(database.server_connections())
        time.sleep(0.25)
    return samples


def wake_latencies(database: Database, streams: Streams, run_ids: list[str]) -> list[float]:
    latencies = []
    for run_id in run_ids:
        seen = len(streams.events[run_id])
        changed = time.monotonic()
        database.touch(run_id)
        deadline = changed + 20
        while len(streams.events[run_id]) == seen and time.monotonic() < deadline:
            time.sleep(0.005)
        if len(streams.events[run_id]) > seen:
            latencies.append(streams.events[run_id][seen] - changed)
    return latencies


def measure(kind: str, args: argparse.Namespace, token: str, run_ids: list[str]) -> None:
    database = Database(args.database_url)
    server = start_server(kind, args.source, args.port, args.database_url, len(run_ids))
    try:
        timed_list(args.port, token, 3)  # warm-up: imports, first connections
        idle = sample_connections(database, 1)
        alone = timed_list(args.port, token, args.requests)
        print(f"\n== {kind}: {' '.join(server_command(kind, args.source, args.port)[1:4])}")
        print(f"GET runs/ alone:            {figures(alone)}; connections {max(idle)}")
        streams = Streams(args.port, token)
        started = time.monotonic()
        streams.open(run_ids)
        opened = [run for run, (status, _) in streams.statuses.items() if status == 200]
        while len(streams.summaries) < len(opened) and time.monotonic() - started < 120:
            time.sleep(0.05)
        print(
            f"{len(run_ids)} streams: {len(opened)} opened, {len(streams.summaries)} summaries "
            f"in {time.monotonic() - started:.1f} s"
        )
        held = sample_connections(database, args.hold_seconds)
        print(
            f"connections while they stay open: max {max(held)}, "
            f"median {statistics.median(held):.0f} (over {args.hold_seconds:.0f} s)"
        )
        beside = timed_list(args.port, token, args.requests)
        print(f"GET runs/ beside them:      {figures(beside)}")
        print(f"connections during those:  {database.server_connections()}")
        woken = wake_latencies(database, streams, opened[: args.changes])
        if woken:
            print(
                f"a change to its stream:     {figures(woken)} "
                f"({len(woken)} of {min(args.changes, len(opened))} arrived)"
            )
        extra = Streams(args.port, token)
        extra.open(run_ids[:5])
        answers = sorted(
            {f"{code} (Retry-After {retry})" for code, retry in extra.statuses.values()}
        )
        print(f"5 streams over the cap:     {', '.join(answers)}")
        extra.close()
        streams.close()
        time.sleep(1)
        after = timed_list(args.port, token, args.requests)
        print(f"GET runs/ alone again:      {figures(after)}")
        without = (statistics.median(alone) + statistics.median(after)) / 2
        ratio = statistics.median(beside) / without
        print(f"GET runs/ median beside the streams / alone (before and after): {ratio:.2f}x")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        database.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/pikku_streams_bench"
    )
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--requests", type=int, default=30, help="timed GET runs/ per phase")
    parser.add_argument("--changes", type=int, default=20, help="watched runs changed one by one")
    parser.add_argument("--hold-seconds", type=float, default=5)
    parser.add_argument("--server", choices=[*SERVERS, "both"], default="both")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to serve from")
    args = parser.parse_args()
    args.source = args.source.resolve()

    recreate_database(args.database_url)
    setup_django(args.database_url)
    token, run_ids = fill_table(args.streams)
    print(
        f"{RUNS} runs ({args.streams} running, watched), server from {args.source}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for kind in SERVERS if args.server == "both" else (args.server,):
        measure(kind, args, token, run_ids)
    print(f"\nload {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
