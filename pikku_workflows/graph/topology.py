"""The shape of a graph's `next` edges: what reaches what, which edges close a cycle (back
edges, firing revisits) and which are forward (node-once), and each node's forward predecessors."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """`successors`: each node's `next` targets (every branch); `component`: each node's
    strongly connected component (nodes that reach each other share one); `cyclic`: the nodes
    on a cycle; `forward_predecessors`: sources of forward edges, sorted. Linear in nodes and
    edges, so a long chain validates as fast as it reads."""

    successors: Mapping[str, tuple[str, ...]]
    component: Mapping[str, int]
    cyclic: frozenset[str]
    forward_predecessors: Mapping[str, tuple[str, ...]]

    def is_back_edge(self, source: str, target: str) -> bool:
        """An edge closes a cycle when its target can reach its source (a self-loop too): for
        an edge, exactly when both ends share a component."""
        return self.component.get(source) == self.component.get(target) is not None

    def on_cycle(self, node: str) -> bool:
        return node in self.cyclic


def build_topology(successors: Mapping[str, Iterable[str]]) -> Topology:
    edges = {node: tuple(targets) for node, targets in successors.items()}
    component = strongly_connected_components(edges)
    sizes = Counter(component.values())
    cyclic = frozenset(
        node for node, targets in edges.items() if sizes[component[node]] > 1 or node in targets
    )
    predecessors: dict[str, set[str]] = {node: set() for node in edges}
    for source, targets in edges.items():
        for target in targets:
            if component[source] != component[target]:
                predecessors.setdefault(target, set()).add(source)
    forward = {node: tuple(sorted(sources)) for node, sources in predecessors.items()}
    return Topology(edges, component, cyclic, forward)


def strongly_connected_components(edges: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Each node's component number (Tarjan's algorithm, iterative, so a 10,000-node chain
    does not meet the recursion limit); targets missing from `edges` count as nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges.get(target, ()))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component[member] = components
                    if member == node:
                        break
                components += 1
    return component


def reachable(
    starts: Iterable[str], edges: Mapping[str, Iterable[str]], avoid: str | None = None
) -> set[str]:
    """Nodes reachable from `starts` (included) along `edges`, never passing through `avoid`."""
    seen: set[str] = set()
    queue = deque(start for start in starts if start != avoid)
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        queue.extend(target for target in edges.get(node, ()) if target != avoid)
    return seen
