"""What workflow code sees: the `Workflow` handle passed to a body and the `StepContext`
passed to a step function."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .replay import ReplayPass

INVOCATION_NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0001")


def invocation_id(run_id: Any, step_key: str) -> str:
    """Stable across attempts and replays: the idempotency key to hand to external systems."""
    return str(uuid.uuid5(INVOCATION_NAMESPACE, f"{run_id}:{step_key}"))


@dataclass(frozen=True)
class StepContext:
    """Passed to a step function as its second argument."""

    run_id: str
    step_id: str
    step_key: str
    invocation_id: str
    attempt: int
    from_invocation_id: str | None
    started_by: str | None


class Workflow:
    """The handle a workflow body drives its run with; every method is replay-safe."""

    def __init__(self, replay: ReplayPass) -> None:
        self._replay = replay

    @property
    def run_id(self) -> str:
        return str(self._replay.run.id)

    @property
    def name(self) -> str:
        return self._replay.run.workflow

    @property
    def input(self) -> Any:
        return self._replay.input

    def do(
        self,
        key: str,
        target: str | Callable[[], Any],
        data: Any = None,
        *,
        retries: int | None = None,
        retry_delay: int | str | None = None,
        on_error: str | None = None,
        timeout: int | str | None = None,
    ) -> Any:
        """Run a step once and return its (JSON round-tripped) result, recorded for replays.

        `target` is a step function name, a workflow name (a child run) or a callable taking no
        arguments. An exhausted step raises `StepFailed` here, which the body may catch.
        """
        from .steps import StepOptions, run_step

        options = StepOptions(retries, retry_delay, on_error, timeout)
        return run_step(self._replay, key, target, data, options)

    def sleep(self, key: str, duration: int | str) -> None:
        """A durable timer: `duration` is ms or "500ms|10s|5m|2h|1d|1w"."""
        from .steps import run_sleep

        run_sleep(self._replay, key, duration)

    def suspend(self, reason: str) -> None:
        """Suspend the run until someone resumes it; a resumed run walks past this point."""
        from .steps import run_suspend

        run_suspend(self._replay, reason)

    def set_state(self, key: str, value: Any) -> None:
        """Record a run-scoped JSON value (shown in the admin; readable as `wf.state[key]`)."""
        self._replay.set_state(key, value)

    @property
    def state(self) -> Mapping[str, Any]:
        """The values set by `set_state` so far in this pass (the same on every replay)."""
        return MappingProxyType(self._replay.state)
