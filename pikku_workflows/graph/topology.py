"""The shape of a graph's `next` edges: what reaches what, which edges close a cycle (back
edges, firing revisits) and which are forward (node-once), and each node's forward predecessors."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    """`successors`: each node's `next` targets (every branch); `reach`: the nodes each node
    reaches along one edge or more; `forward_predecessors`: sources of forward edges, sorted."""

    successors: Mapping[str, tuple[str, ...]]
    reach: Mapping[str, frozenset[str]]
    forward_predecessors: Mapping[str, tuple[str, ...]]

    def is_back_edge(self, source: str, target: str) -> bool:
        """An edge closes a cycle when its target can reach its source (a self-loop too)."""
        return source in self.reach.get(target, frozenset())

    def on_cycle(self, node: str) -> bool:
        return node in self.reach.get(node, frozenset())


def build_topology(successors: Mapping[str, Iterable[str]]) -> Topology:
    edges = {node: tuple(targets) for node, targets in successors.items()}
    reach = {node: frozenset(reachable(edges.get(node, ()), edges)) for node in edges}
    predecessors: dict[str, set[str]] = {node: set() for node in edges}
    for source, targets in edges.items():
        for target in targets:
            if source not in reach.get(target, frozenset()):
                predecessors.setdefault(target, set()).add(source)
    forward = {node: tuple(sorted(sources)) for node, sources in predecessors.items()}
    return Topology(edges, reach, forward)


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
