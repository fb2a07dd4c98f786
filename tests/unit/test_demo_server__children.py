"""`manage.py demo_server`: prints where to log in, starts its children (the worker reloading on
code changes), prefixes each one's output with its name, stops them together."""

from __future__ import annotations

import signal
import sys
from io import BytesIO, StringIO
from typing import Any

import pytest
from django.core.management import call_command

from project.demo.management.commands import demo_server


class FakeChild:
    started: list[FakeChild]

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        self.argv = argv
        self.returncode: int | None = None
        self.terminated = False
        self.stdout = BytesIO(f"{argv[2]} says hello\nand goodbye\n".encode())
        FakeChild.started.append(self)

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        self.returncode = -15

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9


@pytest.fixture
def children(monkeypatch) -> list[FakeChild]:
    FakeChild.started = []
    monkeypatch.setattr(demo_server.subprocess, "Popen", FakeChild)
    monkeypatch.setattr(demo_server, "POLL_SECONDS", 0)

    def signal_group(child: FakeChild, signum: int) -> None:
        child.terminate() if signum == signal.SIGTERM else child.kill()

    monkeypatch.setattr(demo_server, "_signal_group", signal_group)
    return FakeChild.started


WORKER = ["pikku_worker", "--workers", "2", "--reload"]


def test_child_commands__the_server_and_a_worker_both_reloading():
    assert demo_server.child_commands("127.0.0.1:8000") == [
        ["runserver", "127.0.0.1:8000"],
        WORKER,
    ]
    assert demo_server.child_commands("8001", noreload=True) == [
        ["runserver", "8001", "--noreload"],
        ["pikku_worker", "--workers", "2"],
    ]


@pytest.mark.parametrize(
    ("addrport", "url"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000/admin/"),
        ("8001", "http://127.0.0.1:8001/admin/"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000/admin/"),
    ],
)
def test_admin_url(addrport, url):
    assert demo_server.admin_url(addrport) == url


def test_api_urls__the_api_root_and_its_swagger_ui():
    assert demo_server.api_urls("0.0.0.0:9000") == (
        "http://127.0.0.1:9000/api/workflows/",
        "http://127.0.0.1:9000/api/workflows/schema/swagger/",
    )


def test_demo_server__prints_login_and_stops_children_on_interrupt(children, monkeypatch):
    def interrupted(started: list[Any]) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_server, "_wait_for_first_exit", interrupted)
    out = StringIO()

    call_command("demo_server", stdout=out)

    assert "http://127.0.0.1:8000/admin/" in out.getvalue()
    assert "admin / admin" in out.getvalue()
    assert "API:   http://127.0.0.1:8000/api/workflows/" in out.getvalue()
    assert "http://127.0.0.1:8000/api/workflows/schema/swagger/" in out.getvalue()
    assert "seed_demo" not in out.getvalue()  # `make demo` seeds before it starts the server
    lines = out.getvalue().splitlines()
    assert "web    | runserver says hello" in lines
    assert "worker | pikku_worker says hello" in lines
    assert "worker | and goodbye" in lines
    server, worker = children
    assert server.argv[0] == sys.executable
    assert server.argv[1].endswith("manage.py")
    assert server.argv[2:] == ["runserver", "127.0.0.1:8000"]
    assert worker.argv[2:] == WORKER
    assert server.terminated and worker.terminated


def test_demo_server__exits_with_the_code_of_a_child_that_died(children, monkeypatch):
    monkeypatch.setattr(FakeChild, "poll", lambda self: 3)  # the server dies at once

    with pytest.raises(SystemExit) as exit_info:
        call_command("demo_server", "127.0.0.1:8765", stdout=StringIO())

    assert exit_info.value.code == 3
    assert len(children) == 2
