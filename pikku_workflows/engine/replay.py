"""One orchestrator pass's view of a run: its steps read once, ordinals, lineage and state."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidInput
from ..models import WorkflowRun, WorkflowStep
from ..serialization import NotStorableJson, round_trip


@dataclass(frozen=True)
class LeasedRun:
    """A run whose lease its caller has just taken (while creating it, or while recording a step
    outcome), so the pass need not read and lease it again. `steps`: every step of the run when
    the caller knows them (none for a run it has just created)."""

    run: WorkflowRun
    holder: str
    steps: dict[str, WorkflowStep] | None = None


@dataclass
class ReplayPass:
    """Per-pass state; `inline_caller` is true when the starting call drives the run in-process."""

    run: WorkflowRun
    holder: str
    inline_caller: bool
    steps: dict[str, WorkflowStep]
    input: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    ordinals: Counter[str] = field(default_factory=Counter)
    last_key: str | None = None
    # Set when a dispatch released the run lease in its own statement (the pass then ends).
    lease_released: bool = False

    @classmethod
    def begin(
        cls,
        run: WorkflowRun,
        holder: str,
        inline_caller: bool,
        steps: dict[str, WorkflowStep] | None = None,
    ) -> ReplayPass:
        if steps is None:
            # One query for every step of the run: replay must not read step by step.
            steps = {step.step_key: step for step in WorkflowStep.objects.filter(run_id=run.pk)}
        return cls(run, holder, inline_caller, steps, input=round_trip(run.input))

    def allocate_key(self, logical: str) -> tuple[str, str | None]:
        """The physical key of this reach of `logical` and the key reached before it."""
        seen = self.ordinals[logical]
        self.ordinals[logical] += 1
        key = logical if seen == 0 else f"{logical}#{seen}"
        previous, self.last_key = self.last_key, key
        return key, previous

    def set_state(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"A state key must be a non-empty string, not {key!r}.")
        try:
            value = round_trip(value)
        except NotStorableJson as exc:
            raise InvalidInput(f"State {key!r} is not storable JSON: {exc}") from exc
        self.state[key] = value
        stored = self.run.state or {}
        if key in stored and stored[key] == value:
            return  # replays re-set the same values; write only what changed
        # Only the lease holder writes the run's state, so this read-modify-write cannot race.
        merged = {**stored, key: value}
        WorkflowRun.objects.filter(pk=self.run.pk, lease_holder=self.holder).update(state=merged)
        self.run.state = merged
