"""The run's step rows as the planner sees them (`NodeState`), indexed by node, visit, origin,
for_each item and error handler, and kept current one row at a time (`Snapshot.record`): a pass
plans after every step, so nothing here may cost more than the row it records."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..status import StepStatus
from ..step_keys import handled_key, instance_order, parse_instance_key
from .topology import Topology

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

    @property
    def settled(self) -> bool:
        return self.succeeded or self.exhausted


@dataclass(frozen=True)
class SettledItems:
    """Items 0 .. count-1 of a for_each node's first visit, all succeeded, known by their count:
    a pass need not read a long for_each row by row. `results()` returns their results in index
    order; the planner calls it once the node completes."""

    count: int
    results: Callable[[], list[Any]]


@dataclass
class ItemTally:
    """The for_each items of one node: by index, with what the planner asks of them kept as
    counts (`prefix`: how many items from index 0 on succeeded in a row). `settled`: items
    0 .. settled.count-1 known as a count, not as rows in `states`."""

    states: dict[int, NodeState] = field(default_factory=dict)
    exhausted: set[int] = field(default_factory=set)
    prefix: int = 0
    highest: int = -1
    settled: SettledItems | None = None
    _results: list[Any] | None = None

    @classmethod
    def from_settled(cls, settled: SettledItems) -> ItemTally:
        return cls(prefix=settled.count, highest=settled.count - 1, settled=settled)

    def record(self, index: int, old: NodeState | None, new: NodeState) -> None:
        self.states[index] = new
        self.highest = max(self.highest, index)
        self._results = None
        if new.exhausted:
            self.exhausted.add(index)
        else:
            self.exhausted.discard(index)
        if new.succeeded:
            while self.prefix in self.states and self.states[self.prefix].succeeded:
                self.prefix += 1
        elif old is not None and old.succeeded and index < self.prefix:
            self.prefix = index

    def complete(self, count: int) -> bool:
        """Whether items 0 .. count-1 all succeeded."""
        return self.prefix >= count

    def results(self, count: int) -> list[Any]:
        """The results of items 0 .. count-1, in index order (kept until an item changes)."""
        if self._results is None or len(self._results) != count:
            known = self.settled.results()[:count] if self.settled is not None else []
            rows = range(len(known), count)
            self._results = known + [self.states[index].result for index in rows]
        return self._results

    def missing(self, count: int) -> list[int]:
        """The indexes below `count` with no step yet."""
        first = self.settled.count if self.settled is not None else 0
        if first + len(self.states) == count and self.highest == count - 1:
            return []  # every index 0 .. count-1 is there
        return [index for index in range(first, count) if index not in self.states]


class Snapshot:
    """The step rows by key, and by what they are: visits of a node (by visit number, and by
    the instance that fired them), for_each items of a node's first visit (`ItemTally`), error
    handlers (by the key handled); each node's latest succeeded visit, and what is in flight.

    `record` adds a row or replaces one: O(1), so a pass that records the rows it moved and plans
    again pays for its own steps, not the run's. `went_back` turns true when a row settled before
    (succeeded or exhausted) is recorded unsettled: an incremental plan no longer holds then.
    """

    def __init__(
        self,
        topology: Topology,
        steps: Iterable[NodeState] = (),
        settled_items: Mapping[str, SettledItems] | None = None,
    ) -> None:
        self.topology = topology
        self.steps: dict[str, NodeState] = {}
        self.visits: dict[str, dict[int, NodeState]] = {}
        self.origins: dict[tuple[str, str | None], set[int]] = {}
        self.forward_visits: dict[str, set[int]] = {}
        self.items: dict[str, ItemTally] = {}
        self.handlers: dict[str, NodeState] = {}
        self.latest: dict[str, int] = {}
        self.highest_visit: dict[str, int] = {}
        self.in_flight: set[str] = set()
        self.went_back = False
        self._order: dict[str, tuple[str, int, int, int]] = {}
        for node, settled in (settled_items or {}).items():
            self.items[node] = ItemTally.from_settled(settled)
        for step in steps:
            self.record(step)

    def record(self, step: NodeState) -> None:
        old = self.steps.get(step.key)
        if old == step:
            return
        if old is not None and old.settled and not step.settled:
            self.went_back = True
        self.steps[step.key] = step
        if step.in_flight:
            self.in_flight.add(step.key)
        else:
            self.in_flight.discard(step.key)
        self._index(old, step)

    def _index(self, old: NodeState | None, step: NodeState) -> None:
        handled = handled_key(step.key)
        if handled is not None:
            self.handlers[handled] = step
            return
        parsed = parse_instance_key(step.key)
        if parsed is None:
            return  # not a node instance (an engine row); it still counts as in flight
        if parsed.item is not None:
            if parsed.visit == 0:
                self.items.setdefault(parsed.node, ItemTally()).record(parsed.item, old, step)
            return
        visits = self.visits.setdefault(parsed.node, {})
        visits[parsed.visit] = step
        if old is None:
            self._index_origin(parsed.node, parsed.visit, step.from_step_key)
            highest = self.highest_visit.get(parsed.node, -1)
            self.highest_visit[parsed.node] = max(highest, parsed.visit)
        self._track_latest(parsed.node, parsed.visit, step)

    def _index_origin(self, node: str, visit: int, from_key: str | None) -> None:
        self.origins.setdefault((node, from_key), set()).add(visit)
        # Back edges come from nodes on the target's cycle; anything else fired it forward.
        source = parse_instance_key(from_key) if from_key is not None else None
        if source is None or not self.topology.is_back_edge(source.node, node):
            self.forward_visits.setdefault(node, set()).add(visit)

    def _track_latest(self, node: str, visit: int, step: NodeState) -> None:
        latest = self.latest.get(node)
        if step.succeeded and (latest is None or visit > latest):
            self.latest[node] = visit
        elif not step.succeeded and latest == visit:
            succeeded = [number for number, s in self.visits[node].items() if s.succeeded]
            if succeeded:
                self.latest[node] = max(succeeded)
            else:
                del self.latest[node]

    def forward_visit(self, node: str) -> NodeState | None:
        """The node's first visit that an entry or a forward edge fired."""
        visits = self.forward_visits.get(node)
        return self.visits[node][min(visits)] if visits else None

    def visit_from(self, node: str, from_key: str | None) -> NodeState | None:
        """The node's first visit that the instance `from_key` fired."""
        visits = self.origins.get((node, from_key))
        return self.visits[node][min(visits)] if visits else None

    def visit_count(self, node: str) -> int:
        return len(self.visits.get(node, ()))

    def next_visit(self, node: str) -> int:
        """The visit number after the highest recorded one (0 when there is none)."""
        return self.highest_visit.get(node, -1) + 1

    def items_of(self, node: str) -> ItemTally:
        return self.items.get(node) or ItemTally()

    def has_result(self, node: str) -> bool:
        return node in self.latest

    def latest_result(self, node: str) -> Any:
        """The node's result from its latest succeeded visit (for_each nodes have none)."""
        return self.visits[node][self.latest[node]].result

    def order(self, key: str) -> tuple[str, int, int, int]:
        """`instance_order` of a key, parsed once."""
        order = self._order.get(key)
        if order is None:
            order = self._order[key] = instance_order(key)
        return order

    def in_flight_keys(self) -> tuple[str, ...]:
        return tuple(sorted(self.in_flight, key=self.order))
