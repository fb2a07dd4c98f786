"""The `Workflow` handle a workflow body drives its run with (`wf`); every method is replay-safe.

Whatever the engine's own statements meet while serving a call (a database error: a lock or
statement timeout, a deadlock, a revoked permission; a queue that refuses a message) abandons
the pass instead of reaching the body: a run is failed only by user code (docs/architecture.md §3).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, NoReturn

from django.db import Error as DatabaseError

from ...approvals.policy import ApprovalOutcome
from ...control_flow import ContinueAsNew, PassAbandoned
from ...exceptions import InvalidInput, WorkflowDispatchException
from ...serialization import NotStorableJson, round_trip
from ...updates import Update
from .approval_steps import run_approval
from .attempts import record_kept
from .gather import Drive, StepCall, make_call, run_gather, run_map
from .patches import run_patched
from .replay_pass import ReplayPass
from .signal_steps import run_wait_for_signal
from .steps import StepOptions, drive_call, resolve_call, run_sleep, run_suspend
from .update_steps import run_receive, run_reply


@contextlib.contextmanager
def engine_statements() -> Iterator[None]:
    """Turn a failure of the engine's own statements into `PassAbandoned` (a BaseException the
    body's `except Exception:` cannot swallow). User code inside (a step function) reports its
    own errors as the step's outcome, so none of them reach here."""
    try:
        yield
    except (DatabaseError, WorkflowDispatchException) as exc:
        raise PassAbandoned(exc) from exc


class Workflow:
    """The handle a workflow body drives its run with; every method is replay-safe."""

    def __init__(self, replay: ReplayPass, drive: Drive = drive_call) -> None:
        self._replay = replay
        # What reaching a step does: record or run it (a replay check only reads it instead).
        self._drive = drive

    @property
    def run_id(self) -> str:
        return str(self._replay.run.id)

    @property
    def name(self) -> str:
        return self._replay.run.workflow

    @property
    def input(self) -> Any:
        return self._replay.input

    @property
    def scheduled_for(self) -> datetime | None:
        """The nominal time of the schedule tick that started this run (None otherwise)."""
        return self._replay.run.scheduled_for

    def do(
        self,
        key: str,
        target: str | Callable[[], Any],
        data: Any = None,
        *,
        retries: int | None = None,
        retry_delay: int | str | timedelta | None = None,
        on_error: str | None = None,
        timeout: int | str | timedelta | None = None,
        atomic: bool | None = None,
    ) -> Any:
        """Run a step once and return its (JSON round-tripped) result, recorded for replays.

        `target` is a step function name, a workflow name (a child run) or a callable taking no
        arguments. An exhausted step raises `StepFailed` here, which the body may catch.
        `atomic` overrides the step function's own (`@pw.step_function(atomic=...)`).
        """
        options = StepOptions(retries, retry_delay, on_error, timeout, atomic)
        with engine_statements():
            return self._drive(self._replay, resolve_call(self._replay, key, target, data, options))

    def call(
        self,
        key: str,
        target: str | Callable[[], Any],
        data: Any = None,
        *,
        retries: int | None = None,
        retry_delay: int | str | timedelta | None = None,
        on_error: str | None = None,
        timeout: int | str | timedelta | None = None,
        atomic: bool | None = None,
    ) -> StepCall:
        """A step for `wf.gather` to run beside others (`wf.do`'s arguments); nothing runs yet."""
        return make_call(
            key, target, data, StepOptions(retries, retry_delay, on_error, timeout, atomic)
        )

    def gather(
        self, *members: StepCall | Callable[[], Any], return_exceptions: bool = False
    ) -> list[Any]:
        """Run `members` together and return their results in argument order
        (docs/code-workflows.md, "Parallel steps"): `wf.call` values, and branches (callables
        taking no argument that run several steps in order). Queued steps run in parallel on
        workers; the run parks once and is woken once, when the last member settles. Once every
        member settled, the first failure in argument order is raised, or with
        `return_exceptions=True` returned in its place (a step's as `StepFailed`)."""
        with engine_statements():
            return run_gather(
                self._replay, members, return_exceptions=return_exceptions, drive=self._drive
            )

    def map(
        self,
        key: str,
        target: str | Callable[[], Any],
        items: list[Any],
        *,
        max_in_flight: int | None = None,
        retries: int | None = None,
        retry_delay: int | str | timedelta | None = None,
        on_error: str | None = None,
        timeout: int | str | timedelta | None = None,
        atomic: bool | None = None,
    ) -> list[Any]:
        """`target` called with each item of `items` as the steps `key[0]`, `key[1]`, ...
        gathered (their results in order); at most `max_in_flight` of them in flight at once: the
        next ones start once those settled."""
        options = StepOptions(retries, retry_delay, on_error, timeout, atomic)
        with engine_statements():
            return run_map(self._replay, key, target, items, options, max_in_flight=max_in_flight)

    def now(self) -> datetime:
        """The time of the latest durable event the body has taken so far: the run's start,
        then each recorded step's end, in code order. The same on every replay; it never goes
        back. No query, no write."""
        self._replay.draw_allowed()
        return self._replay.cursor.now

    def random(self) -> float:
        """A float in [0, 1), the same on every replay (the run's seed, this call's place)."""
        return self._replay.draw().random()

    def uuid4(self) -> uuid.UUID:
        """A random UUID (version 4), the same on every replay."""
        return uuid.UUID(int=self._replay.draw().getrandbits(128), version=4)

    def uuid7(self) -> uuid.UUID:
        """A time-ordered UUID (version 7) from `wf.now()` and the run's draws, the same on every
        replay."""
        draw = self._replay.draw()
        milliseconds = int(self._replay.cursor.now.timestamp() * 1000) & (1 << 48) - 1
        value = milliseconds << 80 | 0x7 << 76 | draw.getrandbits(12) << 64
        return uuid.UUID(int=value | 0b10 << 62 | draw.getrandbits(62))

    def sleep(self, key: str, duration: int | str | timedelta) -> None:
        """A durable timer: `duration` is ms, "500ms|10s|5m|2h|1d|1w" or a timedelta."""
        with engine_statements():
            run_sleep(self._replay, key, duration)

    def suspend(self, reason: str) -> None:
        """Suspend the run until someone resumes it; a resumed run walks past this point."""
        with engine_statements():
            run_suspend(self._replay, reason)

    def approval(
        self,
        key: str,
        *,
        approvers: list[str] | None = None,
        policy: str = "any",
        quorum: int | None = None,
        exclude_requester: bool = False,
        expires_in: int | str | timedelta | None = None,
        on_expire: str = "reject",
        escalate_to: list[str] | None = None,
        remind_every: int | str | timedelta | None = None,
        form: Any = None,
        summary: str = "",
        data: Any = None,
    ) -> ApprovalOutcome:
        """Wait for people to decide (docs/approvals-and-signals.md): the run parks until the
        policy is satisfied or the deadline passes, then this returns the outcome on every
        replay.

        `approvers`: usernames, `"group:<name>"`, `"perm:<app_label.codename>"` (none: anyone
        holding `pikku_workflows.decide_workflowapproval`); `policy`: "any", "all" or "quorum"
        (`quorum=N`); `exclude_requester`: four eyes; `on_expire`: "reject", "approve", "fail"
        (raises `ApprovalExpired` here) or "escalate" (to `escalate_to`); `form`: a Form class
        or dotted path validating the decider's data; `summary` and `data`: what they decide on.
        """
        options = {
            "approvers": approvers,
            "policy": policy,
            "quorum": quorum,
            "exclude_requester": exclude_requester,
            "expires_in": expires_in,
            "on_expire": on_expire,
            "escalate_to": escalate_to,
            "remind_every": remind_every,
            "form": form,
            "summary": summary,
            "data": data,
        }
        with engine_statements():
            return run_approval(self._replay, key, options)

    def wait_for_signal(
        self, key: str, name: str, *, timeout: int | str | timedelta | None = None
    ) -> Any:
        """Wait for `pw.send_signal(run_id, name, payload)` and return the payload; a signal sent
        before this point was kept and is taken at once. After `timeout` raises `SignalTimeout`,
        which the body may catch."""
        with engine_statements():
            return run_wait_for_signal(self._replay, key, name, timeout)

    def receive(self, name: str, timeout: int | str | timedelta | None = None) -> Update:
        """Take the oldest update `name` sent with `pw.update` (waiting for one if none came):
        a `pw.Update` to answer with `wf.reply`. After `timeout` raises `SignalTimeout`."""
        with engine_statements():
            return run_receive(self._replay, name, timeout)

    def reply(self, message: Update, result: Any = None) -> None:
        """Answer the update `message` with `result` (JSON): its caller's `pw.update` returns
        it. Answered once; the same reply on a replay changes nothing."""
        with engine_statements():
            run_reply(self._replay, message, result)

    def set_state(self, key: str, value: Any) -> None:
        """Record a run-scoped JSON value (shown in the admin; readable as `wf.state[key]`)."""
        with engine_statements():
            record_kept(self._replay)
            self._replay.set_state(key, value)

    def patched(self, patch_id: str) -> bool:
        """True for a run that reaches this point on code that has the patch (a marker step is
        recorded, so it stays True on every replay); False for a run whose history passed this
        point before the patch existed: it keeps the old branch."""
        with engine_statements():
            return run_patched(self._replay, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """For the release that removes a patch's old branch (no run that needs it is left):
        records the marker like `patched`, so workers still on the `patched` release agree,
        and branches nothing."""
        with engine_statements():
            run_patched(self._replay, patch_id)

    @property
    def history_length(self) -> int:
        """How many steps the body has reached so far in this pass (replayed or new): what each
        pass of this run replays, so a long-lived body knows when to `continue_as_new`."""
        return len(self._replay.reached)

    def continue_as_new(self, input: Any = None) -> NoReturn:
        """End this run `continued` and start its successor with `input`: the same workflow,
        subject, starter and parent, a fresh history; signals no wait took go with it
        (docs/long-lived-runs.md). Input that is not storable JSON is `InvalidInput` here, and
        nothing is written."""
        try:
            input = round_trip(input, name="input")
        except NotStorableJson as exc:
            raise InvalidInput(f"The input to continue {self.name!r} with: {exc}") from exc
        raise ContinueAsNew(input)

    @property
    def state(self) -> Mapping[str, Any]:
        """The values set by `set_state` so far in this pass (the same on every replay)."""
        return MappingProxyType(self._replay.state)
