"""The README, followed as a newcomer would: its code blocks (and those of the HTTP API page it
sends them to) are extracted into a fresh `django-admin startproject` (on its default SQLite
database), its commands are run, a real `pikku_worker` completes the example workflow, the
README's own tests pass with `manage.py test`, and the admin and the HTTP API show the run. The
README cannot rot.

With README_INSTALLED_PYTHON (the python of a virtualenv where the package is installed), the
commands run with that virtualenv, not this checkout: CI builds the sdist and the wheel, installs
the wheel into a fresh virtualenv and points this at it, so a wheel missing its templates,
static files or `.sql` statements fails.

Blocks are found by the marker on their first line, wherever the README puts them:

- ```` ```bash ```` starting `# in a new directory`: commands run in an empty directory first;
- ```` ```python ```` starting `# file: <path>` / `# append to: <path>`: then written into the
  project (paths relative to it);
- ```` ```bash ```` starting `# in <dir>/`: then run in that directory of it.

In command lines a trailing `# comment` is dropped, `&&` chains and `cd` are followed, a line
ending in `&` starts in the background (the worker; stopped at the end); `pip install` (the
package is installed already: this checkout, or README_INSTALLED_PYTHON's virtualenv) and the
interactive `createsuperuser` are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# A dozen Django processes start one after the other: minutes on a loaded machine, not 120 s.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
# The page the README sends a newcomer to for the HTTP API: its marked blocks are followed too.
HTTP_API_PAGE = REPO_ROOT / "docs" / "http-api.md"
INSTALLED_PYTHON = os.environ.get("README_INSTALLED_PYTHON")
COMMAND_TIMEOUT = 120
RUN_TIMEOUT = 60
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\w*)\s*$")


@dataclass
class Block:
    lang: str
    first: str
    body: str


def readme_blocks(text: str) -> list[Block]:
    """Every fenced code block, indented ones (inside a list item) included."""
    blocks, lines, index = [], text.splitlines(), 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        start = index
        while index < len(lines) and lines[index].strip() != "```":
            index += 1
        body = textwrap.dedent("\n".join(lines[start:index])) + "\n"
        index += 1
        first, _, _ = body.partition("\n")
        blocks.append(Block(opening["lang"], first.strip(), body))
    return blocks


def clean_environment(root: Path) -> dict[str, str]:
    """What a newcomer's shell has: this Python first on PATH, none of the suite's settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(
            ("PIKKU_", "DJANGO_", "DATABASE_URL", "SQLITE_PATH", "Q_CLUSTER", "PYTHONPATH")
        )
        and key not in ("VIRTUAL_ENV", "README_INSTALLED_PYTHON")
    }
    python = Path(INSTALLED_PYTHON or sys.executable)
    env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env["HOME"] = str(root)
    return env


class Shell:
    """Runs the README's command lines the way a shell would, as far as they need."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = clean_environment(root)
        self.background: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def run_block(self, block: Block, cwd: Path) -> Path:
        for line in block.body.splitlines()[1:]:
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command:
                cwd = self.run_line(command, cwd)
        return cwd

    def run_line(self, line: str, cwd: Path) -> Path:
        for command in (part.strip() for part in line.split("&&")):
            if command.startswith("cd "):
                cwd = cwd / command[3:].strip()
            elif command.startswith("pip install"):
                assert "pikku_workflows" in command  # the wheel: installed already
            elif "createsuperuser" in command:
                continue  # interactive; the admin check below logs in by itself
            elif command.endswith("&"):
                self.start(command.removesuffix("&").strip(), cwd)
            else:
                self.check(command, cwd)
        return cwd

    def check(self, command: str, cwd: Path) -> str:
        """Its output, once it succeeded."""
        return self._run(command, cwd).stdout

    def check_output(self, command: str, cwd: Path) -> str:
        """Both of its streams, once it succeeded (a test runner reports on stderr)."""
        done = self._run(command, cwd)
        return done.stdout + done.stderr

    def _run(self, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            shlex.split(command),
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        assert done.returncode == 0, f"`{command}` in {cwd} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def start(self, command: str, cwd: Path) -> None:
        log = self.root / f"background-{len(self.background)}.log"
        with log.open("wb") as output:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(
                shlex.split(command),
                cwd=cwd,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append((command, process, log))

    def stop_background(self) -> None:
        for _, process, _ in self.background:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 15)
        for _, process, _ in self.background:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)
                process.wait()

    def logs(self) -> str:
        return "\n".join(f"===== {cmd}\n{log.read_text()}" for cmd, _, log in self.background)


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    running = Shell(tmp_path)
    yield running
    running.stop_background()
    print(running.logs())  # shown when the test fails


def run_statuses(shell: Shell, project: Path) -> list[str]:
    runs = json.loads(shell.check("python manage.py pikku runs --json", project))
    return [run["status"] for run in runs]


ADMIN_CHECK = """
from django.contrib.auth import get_user_model
from django.test import Client
from pikku_workflows.models import WorkflowRun

user = get_user_model().objects.create_superuser("newcomer", "n@example.com", "x")
client = Client()
client.force_login(user)
run = WorkflowRun.objects.get(parent_run=None)
for url in ("/admin/", "/admin/pikku_workflows/workflowrun/",
            f"/admin/pikku_workflows/workflowrun/{run.pk}/change/",
            "/admin/pikku_workflows/workflowrun/start/", "/admin/pikku_workflows/workflowworker/"):
    response = client.get(url, HTTP_HOST="localhost")
    assert response.status_code == 200, (url, response.status_code)
page = client.get(f"/admin/pikku_workflows/workflowrun/{run.pk}/change/", HTTP_HOST="localhost")
assert "Completed" in page.content.decode()
# The HTTP API the docs page added lists the run; its Swagger UI is served.
listed = client.get("/api/workflows/runs/", HTTP_HOST="localhost")
assert listed.status_code == 200 and str(run.pk) in listed.content.decode(), listed.content
swagger = client.get("/api/workflows/schema/swagger/", HTTP_HOST="localhost")
assert swagger.status_code == 200, swagger.status_code
# The static files the admin pages link to are where staticfiles finds them.
from django.contrib.staticfiles import finders
for asset in ("admin.css", "admin.js", "approvals.css"):
    assert finders.find(f"pikku_workflows/{asset}"), asset
print("admin ok")
"""

WHERE_IMPORTED = "import pikku_workflows; print(pikku_workflows.__file__)"
PACKAGE_DATA = ("*.sql", "*.html", "*.css", "*.js", "py.typed")


def missing_package_data(installed: Path) -> list[str]:
    """The checkout's package data files (statements, templates, static files) the installed
    package lacks."""
    source = REPO_ROOT / "pikku_workflows"
    shipped = [path for pattern in PACKAGE_DATA for path in source.rglob(pattern)]
    return sorted(
        str(rel) for path in shipped if not (installed / (rel := path.relative_to(source))).exists()
    )


def test_readme__a_fresh_startproject_follows_it_to_a_completed_run(shell: Shell):
    blocks = readme_blocks(README.read_text()) + readme_blocks(HTTP_API_PAGE.read_text())
    setup = [b for b in blocks if b.lang == "bash" and b.first == "# in a new directory"]
    files = [b for b in blocks if b.first.startswith(("# file:", "# append to:"))]
    in_project = [b for b in blocks if b.lang == "bash" and re.fullmatch(r"# in \S+/", b.first)]
    assert setup and files and in_project, "the README lost its marked blocks"

    cwd = shell.root
    for block in setup:
        cwd = shell.run_block(block, cwd)
    project = cwd
    assert (project / "manage.py").exists() and (project / "shop").is_dir()
    if INSTALLED_PYTHON:
        # The package comes from that virtualenv, not from this checkout.
        imported = Path(shell.check(f"python -c {shlex.quote(WHERE_IMPORTED)}", project).strip())
        assert imported.is_relative_to(Path(INSTALLED_PYTHON).parent.parent), imported
        assert not imported.is_relative_to(REPO_ROOT), imported
        # Every file the package needs beside its modules came with it (a `.sql` statement is
        # read only on PostgreSQL: this SQLite project would not notice one missing).
        assert missing_package_data(imported.parent) == []
    for block in files:
        marker, _, path = block.first.partition(":")
        target = project / path.strip()
        content = block.body.partition("\n")[2]
        if marker == "# append to":
            target.write_text(target.read_text() + "\n" + content)
        else:
            target.write_text(content)
    for block in in_project:
        shell.run_block(block, shell.root / block.first.removeprefix("# in ").strip())

    # The worker the README started runs the example to completion.
    deadline = time.monotonic() + RUN_TIMEOUT
    while set(statuses := run_statuses(shell, project)) != {"completed"}:
        assert time.monotonic() < deadline, f"the run did not complete: {statuses}"
        assert "failed" not in statuses, shell.check("python manage.py pikku runs", project)
        time.sleep(0.5)
    # The README's own tests of the workflow pass, and the admin shows the run.
    tested = shell.check_output("python manage.py test shop", project)
    assert "Ran 1 test" in tested and "OK" in tested, tested
    assert "admin ok" in shell.check(
        f"python manage.py shell -c {shlex.quote(ADMIN_CHECK)}", project
    )
