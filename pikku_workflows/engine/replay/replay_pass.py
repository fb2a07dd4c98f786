"""One orchestrator pass's view of a run: its steps read once (with what the database clock says
of each and when each attempt ended), where the body is (keys reached, the moment `wf.now()`
says, the draws of `wf.random()`), lineage and state; and which runs this call stack drives.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from ...exceptions import InvalidInput
from ...models import WorkflowRun, WorkflowStep
from ...serialization import round_trip
from ...step_keys import ordinal_key
from ...validation import KEY_MAX_LENGTH
from ..store.notices import Listener
from ..store.run_state import checked_state, merge_run_state
from ..store.step_transitions import UnrecordedSuccess
from .event_loop import OwnedEventLoop

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


def step_ended_at(step: WorkflowStep) -> datetime | None:
    """When the step's current attempt ended (its history's outcome time), as the pass read it
    or as the transition that ended it in this pass wrote it; None while it has not ended."""
    return getattr(step, "ended_at", None)


@dataclass
class Cursor:
    """Where one line of execution is, in code order: the body's, or one member's of a gather.
    `ordinals`: the reaches of each key so far; `last_key`: the key reached last; `now`: the
    latest durable moment consumed (`wf.now()`); `draws`: the `wf.random()` & co so far;
    `gathers`: the gathers reached; `path` names the line ("" for the body).

    A gather member starts from a copy of the gather's cursor, so how far one member got in a
    pass never shifts another member's keys, draws or clock: each is replayed alike.
    """

    ordinals: Counter[str]
    last_key: str | None
    now: datetime
    draws: int = 0
    gathers: int = 0
    path: str = ""

    def member(self, gather: int, member: int) -> Cursor:
        return Cursor(
            Counter(self.ordinals), self.last_key, self.now, path=f"{self.path}g{gather}.{member}/"
        )

    def join(self, members: list[Cursor]) -> None:
        """Go on after a gather whose members ended with `members`' cursors."""
        for member in members:
            self.ordinals |= member.ordinals  # the larger count of each key
            self.now = max(self.now, member.now)
        self.last_key = members[-1].last_key if members else self.last_key
        self.gathers += 1


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
    cursor: Cursor = field(init=False)
    # Keys the body reached in this pass, and the patch decisions it made (engine/replay/patches.py).
    reached: set[str] = field(default_factory=set)
    # Which line of execution reached each key (two members of a gather must not share one).
    owners: dict[str, str] = field(default_factory=dict)
    # True while the body runs: `wf.random()` & co mean nothing outside it.
    body_running: bool = False
    # Queued steps the gather being run reached: dispatched together when its round ends.
    batch: list[Any] | None = None
    # Attempts of async step functions the gather's round reached: run together after it.
    async_attempts: list[Any] | None = None
    # Where async step functions run; the orchestrator closes it when the pass ends.
    event_loop: OwnedEventLoop = field(default_factory=OwnedEventLoop)
    # Set when a gather member the pass settled was the gather's last by the table's account:
    # members in flight elsewhere that the pass read earlier may have settled meanwhile.
    gather_settled: bool = False
    patches: dict[str, bool] = field(default_factory=dict)
    # Set when a dispatch released the run lease in its own statement (the pass then ends).
    lease_released: bool = False
    # A step's success not written yet: the pass's next write records it (attempts.py).
    unrecorded: UnrecordedSuccess | None = None
    # The ids of the run's answered updates, read at the pass's first `wf.reply`: a replayed
    # reply of one of them writes nothing (update_steps.py).
    answered_updates: set[str] | None = None
    # The LISTENs of the pass's waits in place at `wf.receive`; the orchestrator closes it.
    listener: Listener = field(default_factory=Listener)

    def __post_init__(self) -> None:
        self.cursor = Cursor(Counter(), None, self.run.created_at)

    @property
    def last_key(self) -> str | None:
        return self.cursor.last_key

    @contextlib.contextmanager
    def running_body(self) -> Iterator[None]:
        self.body_running = True
        try:
            yield
        finally:
            self.body_running = False

    def consume(self, step: WorkflowStep) -> None:
        """The body took the outcome of `step`: `wf.now()` moves on to when it ended."""
        ended = step_ended_at(step)
        if ended is not None and ended > self.cursor.now:
            self.cursor.now = ended

    def draw_allowed(self) -> None:
        """InvalidInput outside the body: `wf.now()`, `wf.random()` & co mean nothing there."""
        if not self.body_running:
            raise InvalidInput(
                "wf.now(), wf.random(), wf.uuid4() and wf.uuid7() are for a workflow body while "
                "its pass runs; elsewhere use the standard library."
            )

    def draw(self) -> random.Random:
        """The generator of the body's next draw (`wf.random()`, `wf.uuid4()`, ...): seeded by
        the run's seed and the draw's position, so each replay draws the same."""
        self.draw_allowed()
        position = f"{self.cursor.path}{self.cursor.draws}"
        self.cursor.draws += 1
        seed = self.run.random_seed
        if seed is None:
            seed = self.run.pk.int >> 64  # a run from before seeds were stored
        return random.Random(f"{seed}:{position}")

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
        cursor = self.cursor
        key = ordinal_key(logical, cursor.ordinals[logical])
        cursor.ordinals[logical] += 1
        self.claim_key(key)
        previous, cursor.last_key = cursor.last_key, key
        return key, previous

    def claim_key(self, key: str) -> None:
        """Note that the current line of execution reached `key` (InvalidInput when another
        member of a gather reached it: their steps would be one)."""
        if len(key) > KEY_MAX_LENGTH:
            raise InvalidInput(f"Step key {key!r} is longer than {KEY_MAX_LENGTH} characters.")
        owner = self.owners.setdefault(key, self.cursor.path)
        if owner != self.cursor.path:
            raise InvalidInput(
                f"Step key {key!r} is reached by two members of a gather: give each member "
                "its own keys (a step is known by its key)."
            )
        self.reached.add(key)

    def set_state(self, key: str, value: Any) -> None:
        value = checked_state(key, value)
        self.state[key] = value
        stored = self.run.state or {}
        if key in stored and stored[key] == value:
            return  # replays re-set the same values; write only what changed
        # One key merged in one statement: a step's `ctx.set_state` may write other keys meanwhile.
        merge_run_state(self.run.pk, key, value, lease_holder=self.holder)
        self.run.state = {**stored, key: value}


def read_steps(
    run_id: Any, *, leaving_out: Q | None = None, **filters: Any
) -> dict[str, WorkflowStep]:
    """Every step of the run (matching `filters`, but those `leaving_out` matches) in one query
    (replay must not read step by step), with what the database clock says of each and when its
    current attempt ended."""
    rows = WorkflowStep.objects.filter(run_id=run_id, **filters)
    if leaving_out is not None:
        rows = rows.exclude(leaving_out)
    steps = {}
    for step in rows.with_clock().with_attempt_end():
        observe_timer(step, step.wake_in)
        steps[step.step_key] = step
    return steps
