"""Graph-wide rules a definition must keep: every node reachable, joins that can fire, entries
and error handlers used as such, results read only from nodes that can run first."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from .nodes import GraphNode
from .topology import Topology, reachable


def graph_problems(
    entry: tuple[str, ...], nodes: Mapping[str, GraphNode], topology: Topology
) -> list[str]:
    """Every graph-wide problem; `entry` and each node's targets hold only known node ids."""
    edges = _edges_with_handlers(nodes)
    problems = _unreachable_problems(entry, nodes, edges)
    problems += _entry_problems(entry, topology)
    problems += _handler_problems(entry, nodes)
    problems += _for_each_cycle_problems(nodes, topology)
    problems += _dependency_problems(entry, nodes, edges)
    problems += _join_problems(entry, nodes, topology)
    return problems


def _edges_with_handlers(nodes: Mapping[str, GraphNode]) -> dict[str, tuple[str, ...]]:
    # A handler runs when the node it handles fails: reaching that node reaches the handler.
    return {
        node_id: node.next + ((node.on_error,) if node.on_error else ())
        for node_id, node in nodes.items()
    }


def _unreachable_problems(
    entry: tuple[str, ...], nodes: Mapping[str, GraphNode], edges: Mapping[str, tuple[str, ...]]
) -> list[str]:
    if not entry:
        return []  # "no entry" is reported; every node unreachable would only repeat it
    seen = reachable(entry, edges)
    return [
        f"node {node_id!r} is unreachable: no entry leads to it through next or on_error"
        for node_id in sorted(nodes)
        if node_id not in seen
    ]


def _entry_problems(entry: tuple[str, ...], topology: Topology) -> list[str]:
    return [
        f"entry node {node_id!r} is also the next of {list(sources)}: an entry runs once at "
        "the start, so that edge would never fire"
        for node_id in entry
        if (sources := topology.forward_predecessors.get(node_id))
    ]


def _handler_problems(entry: tuple[str, ...], nodes: Mapping[str, GraphNode]) -> list[str]:
    handled: dict[str, list[str]] = {}
    for node_id, node in sorted(nodes.items()):
        if node.on_error:
            handled.setdefault(node.on_error, []).append(node_id)
    sources = {t: sorted(n for n, node in nodes.items() if t in node.next) for t in handled}
    problems = []
    for handler_id, failing in sorted(handled.items()):
        handler = nodes[handler_id]
        misuses = [
            "be an entry" if handler_id in entry else "",
            f"be the next of {sources[handler_id]}" if sources[handler_id] else "",
            "have next (it is never followed)" if handler.branches or handler.next else "",
            "have input (it receives {'error', 'data'})" if handler.has_input else "",
            "have for_each" if handler.for_each else "",
            "have an on_error of its own" if handler.on_error else "",
        ]
        problems += [
            f"node {handler_id!r} is the on_error handler of {failing}, so it cannot {misuse}"
            for misuse in misuses
            if misuse
        ]
    return problems


def _for_each_cycle_problems(nodes: Mapping[str, GraphNode], topology: Topology) -> list[str]:
    return [
        f"node {node_id!r} has for_each and lies on a cycle: a for_each node runs once"
        for node_id, node in sorted(nodes.items())
        if node.for_each is not None and topology.on_cycle(node_id)
    ]


def _dependency_problems(
    entry: tuple[str, ...], nodes: Mapping[str, GraphNode], edges: Mapping[str, tuple[str, ...]]
) -> list[str]:
    # A node waits for the nodes whose results it reads. One that every path reaches only
    # through the reader itself would make the reader wait forever.
    problems = []
    everything = reachable(entry, edges)
    for node_id, node in sorted(nodes.items()):
        for dependency in node.depends_on:
            if dependency == node_id:
                problems.append(f"node {node_id!r} reads its own result")
            elif dependency in everything and dependency not in reachable(entry, edges, node_id):
                problems.append(
                    f"node {node_id!r} reads the result of {dependency!r}, which can only run "
                    "after it"
                )
    return problems


def _join_problems(
    entry: tuple[str, ...], nodes: Mapping[str, GraphNode], topology: Topology
) -> list[str]:
    # What each node needs of the branching nodes before it ({branching node: branch}), or
    # None when it can never run. Branching nodes on a cycle choose anew on every visit, so
    # only those that run once make choices that exclude each other.
    needs: dict[str, dict[str, str] | None] = {}
    problems = []
    for node_id in _forward_order(nodes, topology):
        predecessors = topology.forward_predecessors.get(node_id, ())
        if node_id in entry or topology.on_cycle(node_id) or not predecessors:
            needs[node_id] = {}
            continue
        needs[node_id], problem = _join_needs(node_id, predecessors, needs, nodes, topology)
        if problem:
            problems.append(problem)
    return problems


def _join_needs(
    node_id: str,
    predecessors: tuple[str, ...],
    needs: Mapping[str, dict[str, str] | None],
    nodes: Mapping[str, GraphNode],
    topology: Topology,
) -> tuple[dict[str, str] | None, str | None]:
    combined: dict[str, tuple[str, str]] = {}  # branching node -> (branch, predecessor needing it)
    for predecessor in predecessors:
        inherited = needs.get(predecessor)
        if inherited is None:
            return None, None  # the predecessor can never run; that is reported where it starts
        for brancher, branch in {
            **inherited,
            **_edge_need(predecessor, node_id, nodes, topology),
        }.items():
            earlier = combined.setdefault(brancher, (branch, predecessor))
            if earlier[0] != branch:
                return None, (
                    f"node {node_id!r} can never run: it joins {earlier[1]!r} and "
                    f"{predecessor!r}, which need different branches of {brancher!r} "
                    f"({earlier[0]!r} and {branch!r})"
                )
    return {brancher: branch for brancher, (branch, _) in combined.items()}, None


def _edge_need(
    source: str, target: str, nodes: Mapping[str, GraphNode], topology: Topology
) -> dict[str, str]:
    branches = nodes[source].branches
    if branches is None or topology.on_cycle(source):
        return {}
    leading = [branch for branch, targets in branches.items() if target in targets]
    return {source: leading[0]} if len(leading) == 1 else {}


def _forward_order(nodes: Mapping[str, GraphNode], topology: Topology) -> list[str]:
    """Nodes in topological order of the forward edges (they form no cycle), ties by id."""
    waiting = {n: len(topology.forward_predecessors.get(n, ())) for n in nodes}
    ready = [n for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node_id = heapq.heappop(ready)
        order.append(node_id)
        for target in set(nodes[node_id].next):
            if target in waiting and not topology.is_back_edge(node_id, target):
                waiting[target] -= 1
                if waiting[target] == 0:
                    heapq.heappush(ready, target)
    return order
