"""The graph planner: a pure function from a run's step rows to the node instances to start now,
or the run's completion or failure. Same rows, same plan, whether planned at once (`plan`) or
kept current by a pass as its steps move (`Planner`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..step_keys import handler_key, parse_instance_key
from .definition import GraphDefinition
from .plans import GRAPH_NODE_FAILED, INVALID_INPUT, Fire, Plan, failure
from .snapshot import NodeState, SettledItems, Snapshot
from .walk import Walk, approval_options

# How many items a for_each may fan out over when neither the caller nor the node says.
DEFAULT_MAX_ITEMS = 1000


def plan(
    definition: GraphDefinition,
    trigger: Any,
    steps: Iterable[NodeState],
    *,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> Plan:
    """Plan the run of `definition` started with `trigger`, given all its step rows.
    `max_items`: the longest list a for_each node without its own `max_items` fans out over."""
    return Planner(definition, trigger, steps, max_items=max_items).plan()


class Planner:
    """Plans one run again and again while a pass moves its steps: `record` the rows that
    changed, then `plan`, which gives what `plan` would give for all the rows recorded.

    A plan costs what changed since the last one, not the run's length (a pass plans after every
    step, and replanning from the first step each time made a long for_each quadratic). Rows
    only move on within a pass; when one settled before is recorded otherwise (an operator's
    retry), the next plan replays the graph from its entries instead. `settled_items`: for_each
    items given as a count instead of rows (`SettledItems`), as a pass reads a long for_each.
    """

    def __init__(
        self,
        definition: GraphDefinition,
        trigger: Any,
        steps: Iterable[NodeState] = (),
        *,
        max_items: int = DEFAULT_MAX_ITEMS,
        settled_items: Mapping[str, SettledItems] | None = None,
    ) -> None:
        self.definition = definition
        self.trigger = trigger
        self.max_items = max_items
        self.settled_items = dict(settled_items or {})
        self.snapshot = Snapshot(definition.topology, steps, self.settled_items)
        self.walk = Walk(definition, trigger, self.snapshot, max_items)

    def record(self, steps: Iterable[NodeState]) -> None:
        for step in steps:
            self.snapshot.record(step)

    def plan(self) -> Plan:
        if self.snapshot.went_back:
            steps = self.snapshot.steps.values()
            self.snapshot = Snapshot(self.definition.topology, steps, self.settled_items)
            self.walk = Walk(self.definition, self.trigger, self.snapshot, self.max_items)
        found = self.walk.advance()
        in_flight = self.snapshot.in_flight_keys()
        blocked = tuple(sorted({visit.node for visit in self.walk.blocked}))
        if self.walk.exhausted:
            return self._failing_plan(in_flight, blocked)
        failures = self.walk.settled_failures + found.failures
        if failures:
            first = min(failures, key=lambda f: self.snapshot.order(f["step_key"]))
            return Plan((), False, None, first, in_flight, blocked)
        fires = tuple(sorted(found.fires, key=lambda fire: self.snapshot.order(fire.key)))
        if fires or in_flight:
            return Plan(fires, False, None, None, in_flight, blocked)
        if self.walk.blocked:
            return Plan((), False, None, self._blocked_failure(), in_flight, blocked)
        output = {node: result for node, (_, result) in sorted(self.walk.leaves.items())}
        return Plan((), True, output, None, in_flight, blocked)

    def _failing_plan(self, in_flight: tuple[str, ...], blocked: tuple[str, ...]) -> Plan:
        """A node failed: start no new work but its error handlers; fail once they are done."""
        handlers, busy = self._error_handlers()
        if handlers or busy:
            return Plan(handlers, False, None, None, in_flight, blocked)
        step = min(self.walk.exhausted.values(), key=lambda step: self.snapshot.order(step.key))
        cause = (step.error or {}).get("message") or "no error message"
        message = f"Graph node {step.key!r} failed after exhausting its attempts: {cause}"
        return Plan(
            (), False, None, failure(GRAPH_NODE_FAILED, message, step.key), in_flight, blocked
        )

    def _error_handlers(self) -> tuple[tuple[Fire, ...], bool]:
        """Each exhausted instance's on_error handler to fire (once), and whether one runs."""
        fires, busy = [], False
        for key, step in self.walk.exhausted.items():
            parsed = parse_instance_key(key)
            assert parsed is not None  # the walk records node instances only
            handler_node = self.definition.nodes[parsed.node].on_error
            if handler_node is None:
                continue
            handler = self.snapshot.handlers.get(key)
            if handler is None:
                data = {"error": step.error, "data": step.data}
                approval = approval_options(self.definition.nodes[handler_node], self.walk.scope())
                fires.append(Fire(handler_key(key), handler_node, data, key, None, approval))
            elif handler.in_flight:
                busy = True
        return tuple(sorted(fires, key=lambda fire: self.snapshot.order(fire.key))), busy

    def _blocked_failure(self) -> dict[str, Any]:
        visit = min(self.walk.blocked, key=lambda visit: visit.node)
        node = self.definition.nodes[visit.node]
        missing = [d for d in node.depends_on if d not in self.walk.results]
        message = (
            f"Graph node {visit.node!r} is due to run but reads the result of {missing}, "
            "which did not run."
        )
        return failure(INVALID_INPUT, message, visit.node)
