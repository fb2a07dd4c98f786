"""One orchestrator pass's view of a run: its steps read once (with what the database clock says
of each), ordinals, lineage and state; and which runs this call stack drives right now.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Q

from ...exceptions import InvalidInput
from ...models import WorkflowRun, WorkflowStep
from ...serialization import round_trip
from ...step_keys import ordinal_key
from ...validation import KEY_MAX_LENGTH
from ..store.run_state import checked_state, merge_run_state
from ..store.step_transitions import UnrecordedSuccess

_driven: ContextVar[frozenset[str]] = ContextVar("pikku_driven_runs", default=frozenset())


@contextlib.contextmanager
def driving(run_id: Any) -> Iterator[None]:
    """While inside, this call stack drives the run (an inline caller, and its child runs)."""
    token = _driven.set(_driven.get() | {str(run_id)})
    try:
        yield
    finally:
        _driven.reset(token)


def is_driven_here(run_id: Any) -> bool:
    """True when an enclosing pass in this call stack will read the run again itself."""
    return str(run_id) in _driven.get()


@dataclass(frozen=True)
class LeasedRun:
    """A run whose lease its caller has just taken (while creating it, or while recording a step
    outcome), so the pass need not read and lease it again. `steps`: every step of the run when
    the caller knows them (none for a run it has just created)."""

    run: WorkflowRun
    holder: str
    steps: dict[str, WorkflowStep] | None = None


def observe_timer(step: WorkflowStep, wake_in: timedelta | None) -> None:
    """Note how far ahead the step's timer is by the database clock, as of now."""
    step.wake_in = wake_in  # type: ignore[attr-defined]
    step.observed_at = time.monotonic()  # type: ignore[attr-defined]


def seconds_until_due(step: WorkflowStep) -> float:
    """How long until the step's timer is due by the database clock (≤ 0: due; 0 without one)."""
    wake_in: timedelta | None = getattr(step, "wake_in", None)
    if wake_in is None:
        return 0.0
    return wake_in.total_seconds() - (time.monotonic() - step.observed_at)  # type: ignore[attr-defined]


def lease_lapsed(step: WorkflowStep) -> bool:
    """Whether the step's lease had lapsed by the database clock when the pass read it (a hint:
    the claim that follows judges it again, in its guarded write)."""
    return bool(getattr(step, "lease_lapsed", False))


@dataclass
class ReplayPass:
    """Per-pass state; `inline_caller` is true when the starting call drives the run in-process,
    and `drive_child` then runs a child run's pass in the same call stack."""

    run: WorkflowRun
    holder: str
    inline_caller: bool
    steps: dict[str, WorkflowStep]
    drive_child: Callable[[Any], None]
    input: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    ordinals: Counter[str] = field(default_factory=Counter)
    last_key: str | None = None
    # Keys the body reached in this pass, and the patch decisions it made (engine/replay/patches.py).
    reached: set[str] = field(default_factory=set)
    patches: dict[str, bool] = field(default_factory=dict)
    # Set when a dispatch released the run lease in its own statement (the pass then ends).
    lease_released: bool = False
    # A step's success not written yet: the pass's next write records it (attempts.py).
    unrecorded: UnrecordedSuccess | None = None

    @classmethod
    def begin(
        cls,
        run: WorkflowRun,
        holder: str,
        *,
        inline_caller: bool,
        drive_child: Callable[[Any], None],
        steps: dict[str, WorkflowStep] | None = None,
    ) -> ReplayPass:
        if steps is None:
            steps = read_steps(run.pk)
        return cls(run, holder, inline_caller, steps, drive_child, input=round_trip(run.input))

    def allocate_key(self, logical: str) -> tuple[str, str | None]:
        """The physical key of this reach of `logical` and the key reached before it."""
        seen = self.ordinals[logical]
        self.ordinals[logical] += 1
        key = ordinal_key(logical, seen)
        if len(key) > KEY_MAX_LENGTH:
            raise InvalidInput(f"Step key {key!r} is longer than {KEY_MAX_LENGTH} characters.")
        previous, self.last_key = self.last_key, key
        self.reached.add(key)
        return key, previous

    def set_state(self, key: str, value: Any) -> None:
        value = checked_state(key, value)
        self.state[key] = value
        stored = self.run.state or {}
        if key in stored and stored[key] == value:
            return  # replays re-set the same values; write only what changed
        # One key merged in one statement: a step's `ctx.set_state` may write other keys meanwhile.
        merge_run_state(self.run.pk, key, value, lease_holder=self.holder)
        self.run.state = {**stored, key: value}


def read_steps(run_id: Any, *, leaving_out: Q | None = None) -> dict[str, WorkflowStep]:
    """Every step of the run (but those `leaving_out` matches) in one query (replay must not
    read step by step), with what the database clock says of each."""
    rows = WorkflowStep.objects.filter(run_id=run_id)
    if leaving_out is not None:
        rows = rows.exclude(leaving_out)
    steps = {}
    for step in rows.with_clock():
        observe_timer(step, step.wake_in)
        steps[step.step_key] = step
    return steps
