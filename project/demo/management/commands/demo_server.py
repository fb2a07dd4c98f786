"""`manage.py demo_server`: the demo's processes side by side (the web server and a worker that
restarts on code changes), each line of their output prefixed with its name, and where the admin
and the HTTP API are; stopped together."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import IO, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.urls import reverse

from .seed_demo import ADMIN_PASSWORD, ADMIN_USERNAME

STOP_TIMEOUT_SECONDS = 10
POLL_SECONDS = 0.2


def child_commands(addrport: str, *, noreload: bool = False) -> list[list[str]]:
    """The `manage.py` commands the demo runs side by side: the web server and one worker, both
    restarting when the code changes (unless `noreload`)."""
    reload = [] if noreload else ["--reload"]
    server = ["runserver", addrport, *(["--noreload"] if noreload else [])]
    return [server, ["pikku_worker", "--workers", "2", *reload]]


# The name each child's lines are prefixed with, in the order of `child_commands`.
CHILD_NAMES = ("web", "worker")


def site_url(addrport: str, path: str) -> str:
    host, _, port = addrport.rpartition(":")
    if host in ("", "0.0.0.0", "0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/{path}"


def admin_url(addrport: str) -> str:
    return site_url(addrport, "admin/")


def api_urls(addrport: str) -> tuple[str, str]:
    """The HTTP API's root and its Swagger UI (project/urls.py mounts it at api/workflows/)."""
    api = reverse("pikku_workflows_api:run-list").removesuffix("runs/").lstrip("/")
    swagger = reverse("pikku_workflows_api:swagger").lstrip("/")
    return site_url(addrport, api), site_url(addrport, swagger)


class Command(BaseCommand):
    help = "Run the demo: the development server and a pikku_worker (stopped together)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--noreload", action="store_true", help="No autoreloader.")

    def handle(self, *args: Any, addrport: str, noreload: bool, **options: Any) -> None:
        self.stdout.write(
            self.style.SUCCESS(f"Admin: {admin_url(addrport)}")
            + f"  (login {ADMIN_USERNAME} / {ADMIN_PASSWORD})"
        )
        api, swagger = api_urls(addrport)
        self.stdout.write(
            self.style.SUCCESS(f"API:   {api}")
            + f"  (Swagger UI: {swagger}; curl -u {ADMIN_USERNAME}:{ADMIN_PASSWORD} {api}runs/)"
        )
        manage_py = str(settings.BASE_DIR / "manage.py")
        # Unbuffered, so each line shows up as it is written, not when a buffer fills.
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        children = [
            subprocess.Popen(
                [sys.executable, manage_py, *argv],
                cwd=settings.BASE_DIR,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                # Its own process group: a stop reaches runserver's reloading child too.
                start_new_session=True,
            )
            for argv in child_commands(addrport, noreload=noreload)
        ]
        width = max(len(name) for name in CHILD_NAMES)
        relays = [
            threading.Thread(
                target=_relay,
                args=(child.stdout, f"{name.ljust(width)} | ", self.stdout),
                daemon=True,
            )
            for name, child in zip(CHILD_NAMES, children, strict=True)
        ]
        for relay in relays:
            relay.start()
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            exit_code = _wait_for_first_exit(children)
        except KeyboardInterrupt:
            exit_code = 0
        finally:
            signal.signal(signal.SIGTERM, previous)
            _stop(children)
            for relay in relays:
                relay.join(STOP_TIMEOUT_SECONDS)  # their last words, e.g. why one exited
        if exit_code:
            sys.exit(exit_code)


def _relay(stream: IO[bytes] | None, prefix: str, out: Any) -> None:
    """Copy a child's output, line by line, each line under its name."""
    if stream is None:
        return
    for line in iter(stream.readline, b""):
        out.write(prefix + line.decode(errors="replace").rstrip("\n"))
        out.flush()


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _wait_for_first_exit(children: list[subprocess.Popen[bytes]]) -> int:
    """Block until one child exits (the demo is down then) and return its exit code."""
    while True:
        for child in children:
            code = child.poll()
            if code is not None:
                return code
        time.sleep(POLL_SECONDS)


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            _signal_group(child, signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            child.wait()


def _signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    try:
        os.killpg(child.pid, signum)
    except (ProcessLookupError, PermissionError):
        # Gone already, or not a group leader (a stand-in in tests): the child alone.
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
