"""The graph planner: a pure function from a run's step snapshot to the node instances to
start now, or the run's completion or failure. Same snapshot, same plan."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidInput
from ..step_keys import handler_key, instance_order, item_key, ordinal_key, parse_instance_key
from .definition import GraphDefinition
from .inputs import Scope, lookup, resolve, resolve_node_input
from .nodes import SEQUENTIAL, GraphNode
from .references import Reference
from .snapshot import NodeState, Snapshot

GRAPH_NODE_FAILED = "GRAPH_NODE_FAILED"
GRAPH_MAX_VISITS = "GRAPH_MAX_VISITS"
INVALID_INPUT = InvalidInput.code


@dataclass(frozen=True)
class Fire:
    """One node instance to start now.

    `key`: its step key (`a`, `a#1`, `h[0]`, `x:onError`); `node`: the node whose options
    (function or approval, retries, retry_delay) it runs with; `input`: its resolved step
    data; `from_key`: the instance that fired it, to store as `from_step_key` (None for an
    entry; for a join, the instance of its first predecessor by id; for an error handler,
    the instance that failed); `item`: the for_each index, else None; `approval`: an
    approval node's options with `data` resolved, else None.
    """

    key: str
    node: str
    input: Any
    from_key: str | None
    item: int | None = None
    approval: dict[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    """What the run does next.

    `fire`: every instance startable now, in key order (a parallel fan-out is one plan);
    after a node failed, only its error handlers. `completed`: nothing in flight and nothing
    fireable: the run completes with `output`, a dict `{node id: result}` of the nodes where
    a path ended (no `next`, or a branching `next` with no branch chosen; a revisited node's
    latest visit), sorted by id; None unless completed. `failure`: the run's error `{code,
    message, step_key}`, else None: GRAPH_NODE_FAILED (`step_key` the exhausted instance),
    GRAPH_MAX_VISITS (the instance whose back edge would exceed the bound), INVALID_INPUT (a
    for_each source that is no list, a branch `next` does not name, a node reading a result
    that will never exist; `step_key` the instance, or the node id when it has none).
    `in_flight`: keys of steps started and not settled, a failed step with attempts left
    included. `blocked`: nodes due to fire that wait for the result of a node they read.
    """

    fire: tuple[Fire, ...]
    completed: bool
    output: Any
    failure: dict[str, Any] | None
    in_flight: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()


def plan(definition: GraphDefinition, trigger: Any, steps: Iterable[NodeState]) -> Plan:
    """Plan the run of `definition` started with `trigger`, given all its step rows."""
    walk = _Walk(definition, trigger, Snapshot(steps))
    walk.run()
    return walk.plan()


def _failure(code: str, message: str, step_key: str) -> dict[str, Any]:
    return {"code": code, "message": message, "step_key": step_key}


@dataclass(frozen=True)
class _Visit:
    """A visit of a node the walk reached: fired by `from_key` (None: an entry), given
    `default_input` when the node has no `input`; `forward` for the entry or a join
    (node-once), False for a back edge (each source instance fires its own visit)."""

    node: str
    from_key: str | None
    default_input: Any
    forward: bool


class _Walk:
    """Replays the graph over the snapshot from the entries: each succeeded instance fires
    its edges; an edge whose target has no instance yet becomes a Fire."""

    def __init__(self, definition: GraphDefinition, trigger: Any, snapshot: Snapshot) -> None:
        self.definition = definition
        self.topology = definition.topology
        self.trigger = trigger
        self.snapshot = snapshot
        self.results = snapshot.latest_results()
        self.queue: deque[_Visit] = deque()
        self.arrivals: dict[str, dict[str, tuple[str, Any]]] = {}
        self.new_visits: dict[str, int] = {}
        self.fires: list[Fire] = []
        self.handler_fires: list[Fire] = []
        self.handlers_busy = False
        self.exhausted: list[NodeState] = []
        self.failures: list[dict[str, Any]] = []
        self.blocked: list[_Visit] = []
        self.leaves: dict[str, tuple[int, Any]] = {}

    def run(self) -> None:
        for entry in self.definition.entry:
            self.queue.append(_Visit(entry, None, self.trigger, forward=True))
        while True:
            while self.queue:
                self._evaluate(self.queue.popleft())
            # A visit waiting for a for_each node's result may be free now that it completed.
            if not self._unblock():
                return

    def _evaluate(self, visit: _Visit) -> None:
        node = self.definition.nodes[visit.node]
        if node.for_each is not None:
            self._evaluate_for_each(visit, node, node.for_each)
            return
        step = self._recorded(visit)
        if step is None:
            self._fire_visit(visit, node)
        elif step.succeeded:
            self._follow(node, step.key, step.result, step.branch_taken)
        elif step.exhausted:
            self._exhaust(node, step)

    def _recorded(self, visit: _Visit) -> NodeState | None:
        """The step row of this visit, if it was fired before."""
        for _, step in sorted(self.snapshot.visits_of(visit.node).items()):
            if visit.forward and self._fired_forward(visit.node, step.from_step_key):
                return step
            if not visit.forward and step.from_step_key == visit.from_key:
                return step
        return None

    def _fired_forward(self, node: str, from_key: str | None) -> bool:
        # Back edges come from nodes on the target's cycle; anything else fired it forward.
        source = parse_instance_key(from_key) if from_key is not None else None
        return source is None or not self.topology.is_back_edge(source.node, node)

    def _fire_visit(self, visit: _Visit, node: GraphNode) -> None:
        if self._waits_for_results(node):
            self.blocked.append(visit)
            return
        key = self._allocate_key(visit, node)
        if key is None:
            return
        scope = self._scope()
        data = resolve_node_input(node, scope, visit.default_input)
        self.fires.append(Fire(key, node.id, data, visit.from_key, None, _approval(node, scope)))

    def _allocate_key(self, visit: _Visit, node: GraphNode) -> str | None:
        """The next visit's key, or None (and a failure) past the node's max_visits."""
        allocated = self.new_visits.get(node.id, 0)
        used = len(self.snapshot.visits_of(node.id)) + allocated
        if used >= node.max_visits:
            message = (
                f"Graph node {node.id!r} reached max_visits ({node.max_visits}): "
                f"{visit.from_key!r} would start visit {used + 1}."
            )
            self.failures.append(_failure(GRAPH_MAX_VISITS, message, visit.from_key or node.id))
            return None
        self.new_visits[node.id] = allocated + 1
        return ordinal_key(node.id, self.snapshot.next_visit(node.id) + allocated)

    def _follow(self, node: GraphNode, key: str, result: Any, branch: str | None) -> None:
        """Fire the edges of a succeeded instance."""
        targets = node.targets(branch)
        if targets is None:
            message = (
                f"Graph node {node.id!r} chose branch {branch!r}, which its next does not name "
                f"(it names {sorted(node.branches or {})})."
            )
            self.failures.append(_failure(INVALID_INPUT, message, key))
            return
        if not targets:
            self._record_leaf(node.id, key, result)
        for target in targets:
            if self.topology.is_back_edge(node.id, target):
                self.queue.append(_Visit(target, key, result, forward=False))
            else:
                self._arrive(target, node.id, key, result)

    def _arrive(self, target: str, source: str, key: str, result: Any) -> None:
        """A forward edge fired: the target's one forward visit is due once every forward
        predecessor fired it (the first instance of each predecessor to do so counts)."""
        arrivals = self.arrivals.setdefault(target, {})
        if source in arrivals:
            return
        arrivals[source] = (key, result)
        predecessors = self.topology.forward_predecessors.get(target, ())
        if target in self.definition.entry or any(p not in arrivals for p in predecessors):
            return
        first_key, first_result = arrivals[predecessors[0]]
        default = (
            first_result if len(predecessors) == 1 else {p: arrivals[p][1] for p in predecessors}
        )
        self.queue.append(_Visit(target, first_key, default, forward=True))

    def _evaluate_for_each(self, visit: _Visit, node: GraphNode, over: Reference) -> None:
        if self._waits_for_results(node):
            self.blocked.append(visit)
            return
        source = lookup(self._scope(), over)
        if not isinstance(source, list):
            self.failures.append(_not_a_list(node.id, over, source))
            return
        items = self.snapshot.items.get(node.id, {})
        if all(i in items and items[i].succeeded for i in range(len(source))):
            self.results[node.id] = [items[i].result for i in range(len(source))]
            self._follow(node, node.id, self.results[node.id], None)
            return
        for index in sorted(items):
            if index < len(source) and items[index].exhausted:
                self._exhaust(node, items[index])
        self._fire_items(visit, node, source, items)

    def _fire_items(
        self, visit: _Visit, node: GraphNode, source: list[Any], items: dict[int, NodeState]
    ) -> None:
        missing = [index for index in range(len(source)) if index not in items]
        if node.mode == SEQUENTIAL:
            # One at a time: the next item starts once every earlier item succeeded.
            if not missing or not all(items[i].succeeded for i in range(missing[0])):
                return
            missing = missing[:1]
        for index in missing:
            scope = self._scope(item=source[index], has_item=True)
            data = resolve_node_input(node, scope, source[index])
            key = item_key(node.id, index)
            self.fires.append(
                Fire(key, node.id, data, visit.from_key, index, _approval(node, scope))
            )

    def _exhaust(self, node: GraphNode, step: NodeState) -> None:
        """A step spent its attempts: its node failed; fire its on_error handler once."""
        self.exhausted.append(step)
        if node.on_error is None:
            return
        handler = self.snapshot.handlers.get(step.key)
        if handler is None:
            handler_node = self.definition.nodes[node.on_error]
            data = {"error": step.error, "data": step.data}
            approval = _approval(handler_node, self._scope())
            self.handler_fires.append(
                Fire(handler_key(step.key), node.on_error, data, step.key, None, approval)
            )
        elif handler.in_flight:
            self.handlers_busy = True

    def _waits_for_results(self, node: GraphNode) -> bool:
        return any(dependency not in self.results for dependency in node.depends_on)

    def _unblock(self) -> bool:
        ready = [v for v in self.blocked if not self._waits_for_results(self._node(v))]
        self.blocked = [v for v in self.blocked if self._waits_for_results(self._node(v))]
        self.queue.extend(ready)
        return bool(ready)

    def _node(self, visit: _Visit) -> GraphNode:
        return self.definition.nodes[visit.node]

    def _scope(self, *, item: Any = None, has_item: bool = False) -> Scope:
        nodes = self.definition.nodes
        return Scope(self.trigger, self.results, item, has_item, nodes)

    def _record_leaf(self, node: str, key: str, result: Any) -> None:
        parsed = parse_instance_key(key)
        visit = parsed.visit if parsed is not None else 0
        if node not in self.leaves or self.leaves[node][0] <= visit:
            self.leaves[node] = (visit, result)

    def plan(self) -> Plan:
        in_flight = self.snapshot.in_flight_keys()
        blocked = tuple(sorted({visit.node for visit in self.blocked}))
        if self.exhausted:
            return self._failing_plan(in_flight, blocked)
        if self.failures:
            return Plan((), False, None, self.failures[0], in_flight, blocked)
        fires = tuple(sorted(self.fires, key=lambda fire: instance_order(fire.key)))
        if fires or in_flight:
            return Plan(fires, False, None, None, in_flight, blocked)
        if self.blocked:
            return Plan((), False, None, self._blocked_failure(), in_flight, blocked)
        output = {node: result for node, (_, result) in sorted(self.leaves.items())}
        return Plan((), True, output, None, in_flight, blocked)

    def _failing_plan(self, in_flight: tuple[str, ...], blocked: tuple[str, ...]) -> Plan:
        """A node failed: start no new work but its error handlers; fail once they are done."""
        handlers = tuple(sorted(self.handler_fires, key=lambda fire: instance_order(fire.key)))
        if handlers or self.handlers_busy:
            return Plan(handlers, False, None, None, in_flight, blocked)
        step = min(self.exhausted, key=lambda step: instance_order(step.key))
        cause = (step.error or {}).get("message") or "no error message"
        message = f"Graph node {step.key!r} failed after exhausting its attempts: {cause}"
        return Plan(
            (), False, None, _failure(GRAPH_NODE_FAILED, message, step.key), in_flight, blocked
        )

    def _blocked_failure(self) -> dict[str, Any]:
        visit = self.blocked[0]
        missing = [d for d in self._node(visit).depends_on if d not in self.results]
        message = (
            f"Graph node {visit.node!r} is due to run but reads the result of {missing}, "
            "which did not run."
        )
        return _failure(INVALID_INPUT, message, visit.node)


def _approval(node: GraphNode, scope: Scope) -> dict[str, Any] | None:
    if node.approval is None:
        return None
    if "data" not in node.approval:
        return dict(node.approval)
    return {**node.approval, "data": resolve(node.approval["data"], scope)}


def _not_a_list(node_id: str, over: Reference, source: Any) -> dict[str, Any]:
    path = ".".join(over.path)
    named = over.root + (f" path {path!r}" if path else "")
    found = type(source).__name__ if source is not None else "missing"
    message = f"Graph node {node_id!r}: for_each needs a list, but {named} is {found}."
    return _failure(INVALID_INPUT, message, node_id)
