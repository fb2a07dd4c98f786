"""The planner's walk: the graph replayed over the run's steps from its entries, each succeeded
instance firing its edges. It is kept between plans: what a settled step decided (its edges
fired, its node failed) stays decided, and a later plan re-reads only the visits still open, so
a plan costs what changed since the last one, not the run's length."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..step_keys import item_key, ordinal_key, parse_instance_key
from .definition import GraphDefinition
from .inputs import Scope, lookup, resolve, resolve_node_input
from .nodes import SEQUENTIAL, GraphNode
from .plans import GRAPH_MAX_VISITS, INVALID_INPUT, Fire, failure
from .references import Reference
from .snapshot import ItemTally, NodeState, Snapshot


@dataclass(frozen=True)
class Visit:
    """A visit of a node the walk reached: fired by `from_key` (None: an entry), given
    `default_input` when the node has no `input`; `forward` for the entry or a join
    (node-once), False for a back edge (each source instance fires its own visit)."""

    node: str
    from_key: str | None
    default_input: Any
    forward: bool


@dataclass(frozen=True)
class _NewVisit:
    """A visit with no step yet, its input resolved; its key is given once the round is over."""

    visit: Visit
    data: Any
    approval: dict[str, Any] | None


@dataclass
class Round:
    """What one plan found beyond what the walk keeps: instances to start, and failures that
    hold only as long as the steps stay as they are (a bound reached, a source no list)."""

    fires: list[Fire] = field(default_factory=list)
    new_visits: list[_NewVisit] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)


class Results(Mapping[str, Any]):
    """The results references read: each node's latest succeeded visit, and the ordered item
    results of each for_each node the walk saw complete."""

    def __init__(self, snapshot: Snapshot, for_each: dict[str, list[Any]]) -> None:
        self.snapshot = snapshot
        self.for_each = for_each

    def __getitem__(self, node: str) -> Any:
        if node in self.for_each:
            return self.for_each[node]
        if self.snapshot.has_result(node):
            return self.snapshot.latest_result(node)
        raise KeyError(node)

    def __contains__(self, node: object) -> bool:
        return node in self.for_each or (isinstance(node, str) and self.snapshot.has_result(node))

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self.snapshot.latest), **dict.fromkeys(self.for_each)})

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Walk:
    """The walk of one run. `advance` evaluates the visits still open (waiting for a step to
    settle, or due to fire) and whatever they fire, and returns the round's findings; `exhausted`
    (the instances that spent their attempts), `leaves`, `blocked` and `settled_failures`
    accumulate across rounds."""

    def __init__(
        self, definition: GraphDefinition, trigger: Any, snapshot: Snapshot, max_items: int
    ) -> None:
        self.definition = definition
        self.topology = definition.topology
        self.trigger = trigger
        self.snapshot = snapshot
        self.max_items = max_items
        self.for_each_results: dict[str, list[Any]] = {}
        self.results = Results(snapshot, self.for_each_results)
        self.open = [Visit(entry, None, trigger, forward=True) for entry in definition.entry]
        self.blocked: list[Visit] = []
        self.arrivals: dict[str, dict[str, tuple[str, Any]]] = {}
        self.leaves: dict[str, tuple[int, Any]] = {}
        self.exhausted: dict[str, NodeState] = {}
        self.settled_failures: list[dict[str, Any]] = []
        self.round = Round()

    def advance(self) -> Round:
        self.round = Round()
        queue = deque(self.open)
        self.open = []
        while True:
            while queue:
                self._evaluate(queue.popleft(), queue)
            # A visit waiting for a for_each node's result may be free now that it completed.
            blocked, self.blocked = self.blocked, []
            for visit in blocked:
                (self.blocked if self._waits_for_results(visit.node) else queue).append(visit)
            if not queue:
                break
        self._allocate_keys()
        return self.round

    def _evaluate(self, visit: Visit, queue: deque[Visit]) -> None:
        node = self.definition.nodes[visit.node]
        if node.for_each is not None:
            self._evaluate_for_each(visit, node, node.for_each, queue)
            return
        step = self._recorded(visit)
        if step is None:
            self._new_visit(visit, node)
        elif step.succeeded:
            self._follow(node, step.key, step.result, step.branch_taken, queue)
        elif step.exhausted:
            self.exhausted[step.key] = step
        else:
            self.open.append(visit)

    def _recorded(self, visit: Visit) -> NodeState | None:
        """The step row of this visit, if it was fired before."""
        if visit.forward:
            return self.snapshot.forward_visit(visit.node)
        return self.snapshot.visit_from(visit.node, visit.from_key)

    def _new_visit(self, visit: Visit, node: GraphNode) -> None:
        if self._waits_for_results(node.id):
            self.blocked.append(visit)
            return
        scope = self._scope()
        data = resolve_node_input(node, scope, visit.default_input)
        self.round.new_visits.append(_NewVisit(visit, data, approval_options(node, scope)))
        self.open.append(visit)

    def _allocate_keys(self) -> None:
        """Key the round's new visits, node by node in the order of what fired them (whatever
        order the walk met them in): the next visit numbers, up to the node's max_visits."""
        by_node: dict[str, list[_NewVisit]] = {}
        for new in self.round.new_visits:
            by_node.setdefault(new.visit.node, []).append(new)
        for node_id, visits in by_node.items():
            visits.sort(key=self._origin_order)
            node = self.definition.nodes[node_id]
            used = self.snapshot.visit_count(node_id)
            first = self.snapshot.next_visit(node_id)
            for offset, new in enumerate(visits):
                visit = new.visit
                if used + offset >= node.max_visits:
                    message = (
                        f"Graph node {node_id!r} reached max_visits ({node.max_visits}): "
                        f"{visit.from_key!r} would start visit {used + offset + 1}."
                    )
                    step_key = visit.from_key or node_id
                    self.round.failures.append(failure(GRAPH_MAX_VISITS, message, step_key))
                    continue
                key = ordinal_key(node_id, first + offset)
                fire = Fire(key, node_id, new.data, visit.from_key, None, new.approval)
                self.round.fires.append(fire)

    def _origin_order(self, new: _NewVisit) -> tuple[int, tuple[str, int, int, int]]:
        from_key = new.visit.from_key
        return (0, ("", 0, 0, 0)) if from_key is None else (1, self.snapshot.order(from_key))

    def _follow(
        self, node: GraphNode, key: str, result: Any, branch: str | None, queue: deque[Visit]
    ) -> None:
        """Fire the edges of a succeeded instance (once: what it fired stays fired)."""
        targets = node.targets(branch)
        if targets is None:
            message = (
                f"Graph node {node.id!r} chose branch {branch!r}, which its next does not name "
                f"(it names {sorted(node.branches or {})})."
            )
            self.settled_failures.append(failure(INVALID_INPUT, message, key))
            return
        if not targets:
            self._record_leaf(node.id, key, result)
        for target in targets:
            if self.topology.is_back_edge(node.id, target):
                queue.append(Visit(target, key, result, forward=False))
            else:
                self._arrive(target, node.id, key, result, queue)

    def _arrive(self, target: str, source: str, key: str, result: Any, queue: deque[Visit]) -> None:
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
        queue.append(Visit(target, first_key, default, forward=True))

    def _evaluate_for_each(
        self, visit: Visit, node: GraphNode, over: Reference, queue: deque[Visit]
    ) -> None:
        if self._waits_for_results(node.id):
            self.blocked.append(visit)
            return
        source = lookup(self._scope(), over)
        problem = self._source_problem(node, over, source)
        if problem is not None:
            self.round.failures.append(problem)
            self.open.append(visit)
            return
        items = self.snapshot.items_of(node.id)
        if items.complete(len(source)):
            self.for_each_results[node.id] = items.results(len(source))
            self._follow(node, node.id, self.for_each_results[node.id], None, queue)
            return
        for index in sorted(items.exhausted):
            if index < len(source):
                self.exhausted[item_key(node.id, index)] = items.states[index]
        self._fire_items(visit, node, source, items)
        self.open.append(visit)

    def _source_problem(
        self, node: GraphNode, over: Reference, source: Any
    ) -> dict[str, Any] | None:
        if not isinstance(source, list):
            return _not_a_list(node.id, over, source)
        limit = node.max_items or self.max_items
        if len(source) <= limit:
            return None
        setting = "its max_items" if node.max_items else "the MAX_FAN_OUT setting"
        message = (
            f"Graph node {node.id!r}: for_each over {len(source)} items; {setting} allows at "
            f"most {limit} (set the node's max_items to allow more)."
        )
        return failure(INVALID_INPUT, message, node.id)

    def _fire_items(
        self, visit: Visit, node: GraphNode, source: list[Any], items: ItemTally
    ) -> None:
        if node.mode == SEQUENTIAL:
            # One at a time: the next item starts once every earlier item succeeded.
            following = items.prefix
            missing = (
                [following] if following < len(source) and following not in items.states else []
            )
        else:
            missing = items.missing(len(source))
        for index in missing:
            scope = self._scope(item=source[index], has_item=True)
            data = resolve_node_input(node, scope, source[index])
            key = item_key(node.id, index)
            approval = approval_options(node, scope)
            self.round.fires.append(Fire(key, node.id, data, visit.from_key, index, approval))

    def _waits_for_results(self, node_id: str) -> bool:
        node = self.definition.nodes[node_id]
        return any(dependency not in self.results for dependency in node.depends_on)

    def _record_leaf(self, node: str, key: str, result: Any) -> None:
        parsed = parse_instance_key(key)
        visit = parsed.visit if parsed is not None else 0
        if node not in self.leaves or self.leaves[node][0] <= visit:
            self.leaves[node] = (visit, result)

    def scope(self) -> Scope:
        return self._scope()

    def _scope(self, *, item: Any = None, has_item: bool = False) -> Scope:
        nodes = self.definition.nodes
        return Scope(self.trigger, self.results, item, has_item, nodes)


def approval_options(node: GraphNode, scope: Scope) -> dict[str, Any] | None:
    """An approval node's options with its `data` resolved; None for a function node."""
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
    return failure(INVALID_INPUT, message, node_id)
