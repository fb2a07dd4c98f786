"""The topology of a graph's edges: components, cycles, back and forward edges, on graphs
small enough to check by eye and on a chain long enough that a quadratic or recursive
reading would show."""

from __future__ import annotations

from pikku_workflows.graph import definition_problems
from pikku_workflows.graph.topology import build_topology, strongly_connected_components


def test_components__nodes_that_reach_each_other_share_one():
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": ["e"], "e": ["d"], "f": []}
    component = strongly_connected_components(edges)
    assert component["a"] == component["b"] == component["c"]
    assert component["d"] == component["e"] != component["a"]
    assert len({component["f"], component["a"], component["d"]}) == 3


def test_components__a_target_missing_from_the_edges_is_a_node_of_its_own():
    component = strongly_connected_components({"a": ["ghost"]})
    assert component["ghost"] != component["a"]


def test_topology__cycles_back_edges_and_forward_predecessors():
    topology = build_topology({"a": ["b"], "b": ["c"], "c": ["b", "d"], "d": ["d"], "e": ["d"]})
    assert {node for node in "abcde" if topology.on_cycle(node)} == {"b", "c", "d"}
    assert topology.is_back_edge("c", "b")
    assert topology.is_back_edge("d", "d")
    assert not topology.is_back_edge("a", "b")
    assert not topology.is_back_edge("c", "d")
    assert topology.forward_predecessors["b"] == ("a",)
    assert topology.forward_predecessors["d"] == ("c", "e")


def test_topology__a_ten_thousand_node_chain_validates():
    size = 10_000
    nodes: dict[str, dict[str, str]] = {
        f"n{i}": {"function": "f", "next": f"n{i + 1}"} for i in range(size - 1)
    }
    nodes[f"n{size - 1}"] = {"function": "f"}
    assert definition_problems({"entry": "n0", "nodes": nodes}) == []
    topology = build_topology(
        {node_id: [node["next"]] for node_id, node in nodes.items() if "next" in node}
    )
    assert not any(topology.on_cycle(node_id) for node_id in nodes)
    assert topology.forward_predecessors[f"n{size - 1}"] == (f"n{size - 2}",)
