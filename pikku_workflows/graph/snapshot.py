"""The run's step rows as the planner sees them (`NodeState`), indexed by node, visit, for_each
item and error handler."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..status import StepStatus
from ..step_keys import handled_key, instance_order, parse_instance_key

IN_FLIGHT_STATUSES = frozenset(
    {StepStatus.PENDING, StepStatus.SCHEDULED, StepStatus.RUNNING, StepStatus.WAITING}
)


@dataclass(frozen=True)
class NodeState:
    """One step row of the run.

    `key`: physical step key (`validate`, `a#1` for a's 2nd visit, `handle[0]` for item 0,
    `x:onError`); `status`: a StepStatus value; `attempt` / `attempt_limit`: the attempt
    running or last run, and how many the step may have; `result`: its result once
    succeeded; `branch_taken`: the branch its node chose (`ctx.branch`), or None;
    `from_step_key`: the instance that fired it (None for an entry); `error`: the stored
    error dict of its last failed attempt; `data`: the input it was given.
    """

    key: str
    status: str
    attempt: int
    attempt_limit: int
    result: Any = None
    branch_taken: str | None = None
    from_step_key: str | None = None
    error: dict[str, Any] | None = None
    data: Any = None

    @property
    def succeeded(self) -> bool:
        return self.status == StepStatus.SUCCEEDED

    @property
    def exhausted(self) -> bool:
        """Failed with no attempt left: only now does its node count as failed."""
        return self.status == StepStatus.FAILED and self.attempt >= self.attempt_limit

    @property
    def in_flight(self) -> bool:
        """Started and not settled; a failed attempt with attempts left waits to retry."""
        return self.status in IN_FLIGHT_STATUSES or (
            self.status == StepStatus.FAILED and not self.exhausted
        )


class Snapshot:
    """The step rows by key, and by what they are: visits of a node (by visit number),
    for_each items of a node's first visit (by index), error handlers (by the key handled)."""

    def __init__(self, steps: Iterable[NodeState]) -> None:
        self.steps = {step.key: step for step in steps}
        self.visits: dict[str, dict[int, NodeState]] = {}
        self.items: dict[str, dict[int, NodeState]] = {}
        self.handlers: dict[str, NodeState] = {}
        for key in sorted(self.steps, key=instance_order):
            self._index(self.steps[key])

    def _index(self, step: NodeState) -> None:
        handled = handled_key(step.key)
        if handled is not None:
            self.handlers[handled] = step
            return
        parsed = parse_instance_key(step.key)
        if parsed is None:
            return  # not a node instance (an engine row); it still counts as in flight
        if parsed.item is None:
            self.visits.setdefault(parsed.node, {})[parsed.visit] = step
        elif parsed.visit == 0:
            self.items.setdefault(parsed.node, {})[parsed.item] = step

    def visits_of(self, node: str) -> dict[int, NodeState]:
        return self.visits.get(node, {})

    def next_visit(self, node: str) -> int:
        """The visit number after the highest recorded one (0 when there is none)."""
        visits = self.visits_of(node)
        return max(visits) + 1 if visits else 0

    def latest_results(self) -> dict[str, Any]:
        """Each node's result from its latest succeeded visit (for_each nodes excluded)."""
        results = {}
        for node, visits in self.visits.items():
            succeeded = [number for number, step in visits.items() if step.succeeded]
            if succeeded:
                results[node] = visits[max(succeeded)].result
        return results

    def in_flight_keys(self) -> tuple[str, ...]:
        return tuple(sorted((k for k, s in self.steps.items() if s.in_flight), key=instance_order))
