"""`pikku_worker --reload`: run the worker as a child process and start it again whenever a Python
file it loaded changes, as `runserver` does (Django's autoreloader finds and watches the files),
or at once when it is killed; one that exits with an error waits for the next change.

Without it a worker keeps running the code it started with: an edited `workflows.py` would
silently go on running the old body.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from django.utils import autoreload

# A stopped worker hands its step leases back at once and drains what it holds; then it is
# killed (its leases lapse as a crash's would).
STOP_SECONDS = 30
PR_SET_PDEATHSIG = 1


class Output(Protocol):
    def write(self, text: str) -> Any: ...

    def flush(self) -> Any: ...


def child_arguments(flag: str = "--reload") -> list[str]:
    """This process's command line (as Django's autoreloader rebuilds it), less `flag`."""
    return [argument for argument in autoreload.get_child_arguments() if argument != flag]


class Supervisor:
    """Starts the worker, restarts it when a watched file changes, stops it on SIGTERM/SIGINT."""

    def __init__(self, argv: list[str], out: Output) -> None:
        self.argv = argv
        self.out = out
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.changed: list[str] = []

    def run(self) -> int:
        reloader = autoreload.get_reloader()
        previous = {
            signum: signal.signal(signum, self._stop_signal)
            for signum in (signal.SIGTERM, signal.SIGINT)
        }
        autoreload.file_changed.connect(self._file_changed)
        try:
            self.start()
            exited_reported = False
            for _ in self._ticks(reloader):
                if self.changed:
                    self.say(f"{self.changed[0]} changed: restarting the worker")
                    self.changed.clear()
                    self.stop_child()
                    self.start()
                    exited_reported = False
                elif self.child is not None and (code := self.child.poll()) is not None:
                    if code < 0 and not self.stopping:
                        # Killed (an OOM killer, a `kill -9` to see recovery at work): back up.
                        self.say(f"the worker was killed (signal {-code}): starting it again")
                        self.start()
                    elif not exited_reported:
                        self.say(
                            f"the worker exited with {code}; "
                            "it starts again when a watched file changes"
                        )
                        exited_reported = True
        finally:
            autoreload.file_changed.disconnect(self._file_changed)
            self.stop_child()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return 0

    def _ticks(self, reloader: Any) -> Iterator[None]:
        """One tick per second or so (the reloader's own pace), until stopped."""
        ticker = reloader.tick()
        while not self.stopping:
            with contextlib.suppress(StopIteration):
                next(ticker)
            yield

    def _file_changed(self, sender: Any, file_path: Path, **kwargs: Any) -> bool:
        self.changed.append(str(file_path))
        return True  # handled here: the reloader must not exit this process

    def _stop_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def start(self) -> None:
        self.child = subprocess.Popen(
            self.argv, start_new_session=True, preexec_fn=_die_with_parent
        )
        self.say(f"worker started (pid {self.child.pid}); watching for code changes")

    def stop_child(self) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        # The whole group: every forked worker process hands its step leases back at once.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()

    def say(self, message: str) -> None:
        self.out.write(f"pikku_worker --reload: {message}\n")
        self.out.flush()


def _die_with_parent() -> None:
    """In the child before exec: a SIGTERM when the supervisor dies, however it dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
