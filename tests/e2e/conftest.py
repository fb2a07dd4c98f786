"""A real `manage.py pikku_worker` subprocess against the test database, with shrunk thresholds;
polling helpers with deadlines; process-tree inspection through /proc."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from django.conf import settings

from tests.conftest import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_START_TIMEOUT = 20
WORKER_STOP_TIMEOUT = 10

# Leases, windows and polls shrunk so a crash heals in seconds (conf.py reads PIKKU_<NAME>).
WORKER_SETTINGS = {
    "PIKKU_STEP_LEASE_SECONDS": "3",
    "PIKKU_RUN_LEASE_SECONDS": "3",
    "PIKKU_TIMER_POLL_SECONDS": "0.1",
    "PIKKU_RECOVERY_INTERVAL_SECONDS": "1",
    "PIKKU_RELAY_PENDING_AFTER_SECONDS": "2",
    "PIKKU_STALLED_RUN_AFTER_SECONDS": "3",
    "PIKKU_REDISPATCH_BACKOFF_SECONDS": "1",
    "PIKKU_WORKER_HEARTBEAT_SECONDS": "0.3",
}


def worker_database_url() -> str:
    """The URL of the database pytest-django switched to (test_<name>), for the subprocess."""
    db = settings.DATABASES["default"]
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Worker:
    """One `pikku_worker --workers 2` process (its own session, so its group can be killed);
    `args` are more options (`--reload`)."""

    def __init__(self, log_path: Path, args: tuple[str, ...] = (), **settings: str) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        env = {
            **os.environ,
            **WORKER_SETTINGS,
            "DATABASE_URL": worker_database_url(),
            "PIKKU_EXTRA_WORKFLOW_MODULES": "tests.e2e.workflows",
            "PYTHONUNBUFFERED": "1",
            **settings,
        }
        env.pop("Q_CLUSTER_NAME", None)
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "pikku_worker", "--workers", "2", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        def started() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"pikku_worker exited with {self.process.returncode}:\n{self.log()}")
            return "pikku_worker: cluster" in self.log()

        wait_until(started, WORKER_START_TIMEOUT, "pikku_worker to start")

    def kill_group(self) -> None:
        """SIGKILL the whole process group: what a lost machine or an OOM kill of a pod does."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(WORKER_STOP_TIMEOUT)

    def terminate_group(self) -> None:
        """SIGTERM to the whole process group (systemd's default KillMode, a deploy)."""
        os.killpg(self.pid, signal.SIGTERM)
        self.process.wait(WORKER_STOP_TIMEOUT + 20)

    def kill_main(self) -> None:
        """SIGKILL the main process only: what an OOM killer or a lost machine does."""
        self.process.kill()
        self.process.wait(WORKER_STOP_TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WORKER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WORKER_STOP_TIMEOUT)
        # Whatever the group still holds (a test that failed before it could clean up).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self._log.close()


@pytest.fixture
def start_worker(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start workers on demand; stop them (before the test database is flushed) afterwards.

    Their logs are printed at teardown, which pytest shows only for a failing test.
    """
    workers: list[Worker] = []

    def start(args: tuple[str, ...] = (), **settings: str) -> Worker:
        """A new worker; `settings` override WORKER_SETTINGS (PIKKU_<NAME>="value")."""
        worker = Worker(tmp_path / f"worker-{len(workers) + 1}.log", args, **settings)
        workers.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in workers:
        worker.stop()
    for worker in workers:
        print(f"===== pikku_worker pid {worker.pid} log =====\n{worker.log()}")


# --- the process tree, read from /proc (Linux) ----------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state, ppid, ..., starttime (#22).
    return text.rsplit(")", 1)[1].split()


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid`, with its start time (to tell a reused pid apart)."""
    parents: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(int(entry))
        if fields is None or fields[0] == "Z":
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry))
        started[int(entry)] = fields[19]
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        for child in parents.get(frontier.pop(), []):
            found[child] = started[child]
            frontier.append(child)
    return found


def alive(processes: dict[int, str]) -> dict[int, str]:
    """Those of `processes` still running (not gone, not a zombie, not a reused pid)."""
    still = {}
    for pid, start_time in processes.items():
        fields = _stat(pid)
        if fields is not None and fields[0] != "Z" and fields[19] == start_time:
            still[pid] = start_time
    return still
