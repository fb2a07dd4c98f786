"""Validation of a graph definition that lists every problem at once: its structure (pure,
checked at registration) and, given the names that exist, its step functions."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidInput
from ..serialization import NestedTooDeeply, NotStorableJson, round_trip
from ..step_keys import RESERVED_KEY_CHARACTERS
from .graph_rules import graph_problems
from .node_checks import node_problems
from .nodes import GraphNode, build_node
from .references import BUILTIN_ROOTS
from .topology import Topology, build_topology

TOP_LEVEL_OPTIONS = frozenset({"entry", "nodes", "description"})
# Step keys hold 255 characters; a node id leaves room for `#N`, `[i]` and `:onError`.
NODE_ID_MAX_LENGTH = 200

FunctionNames = Collection[str] | Callable[[str], bool]


@dataclass(frozen=True)
class CheckedStructure:
    """What checking a definition's structure found: its `problems`, and what it built on the
    way (the definition as stored, its nodes and their topology) for `parse_definition`;
    `source` is the definition's JSON round trip, or as given when it is not storable."""

    problems: list[str]
    source: Any = None
    storable: bool = False
    nodes: dict[str, GraphNode] = field(default_factory=dict)
    topology: Topology | None = None


def structure_problems(raw: Any, *, max_nodes: int | None = None) -> list[str]:
    """Every problem with the definition itself, step function names aside. A graph of more
    than `max_nodes` nodes, or nested too deeply to walk, is refused with that one problem."""
    return check_structure(raw, max_nodes=max_nodes).problems


def check_structure(raw: Any, *, max_nodes: int | None = None) -> CheckedStructure:
    """`structure_problems`, with the nodes and topology built on the way (linear in nodes and
    edges: each is built once)."""
    if isinstance(raw, dict) and isinstance(raw.get("nodes"), dict):
        count = len(raw["nodes"])
        if max_nodes is not None and count > max_nodes:
            return CheckedStructure(
                [f"the graph has {count} nodes; at most {max_nodes} (GRAPH_MAX_NODES)"]
            )
    try:
        raw, storable = _as_json(raw)
    except NestedTooDeeply as exc:
        return CheckedStructure([f"the definition is not storable JSON: {exc}"])
    if not isinstance(raw, dict):
        problem = f"a graph definition is an object with 'entry' and 'nodes', not {raw!r}"
        return CheckedStructure([problem])
    problems = [f"unknown option {key!r}" for key in sorted(set(raw) - TOP_LEVEL_OPTIONS, key=str)]
    if not isinstance(raw.get("description", ""), str):
        problems.append(f"description must be a string, not {raw['description']!r}")
    raw_nodes = raw.get("nodes")
    if not isinstance(raw_nodes, dict) or not raw_nodes:
        problems.append("nodes must be a non-empty object of {node id: node options}")
        raw_nodes = raw_nodes if isinstance(raw_nodes, dict) else {}
    node_ids = {key for key in raw_nodes if isinstance(key, str)}
    problems += _node_id_problems(raw_nodes)
    entry, entry_problems = _entry(raw.get("entry"), node_ids)
    problems += entry_problems
    for node_id in sorted(node_ids):
        problems += node_problems(node_id, raw_nodes[node_id], node_ids)
    nodes = build_nodes(raw_nodes)
    topology = build_topology({node_id: node.next for node_id, node in nodes.items()})
    problems += graph_problems(entry, nodes, topology)
    return CheckedStructure(problems, raw, storable, nodes, topology)


def function_problems(nodes: Iterable[GraphNode], known_functions: FunctionNames) -> list[str]:
    """One problem per node naming a step function (or workflow) that is not known."""
    known = known_functions if callable(known_functions) else known_functions.__contains__
    return [
        f"node {node.id!r}: unknown step function {node.function!r}"
        for node in sorted(nodes, key=lambda node: node.id)
        if node.function is not None and not known(node.function)
    ]


def definition_problems(raw: Any, known_functions: FunctionNames | None = None) -> list[str]:
    """Every problem: the structure's, then (when `known_functions` is given) unknown step
    functions. `known_functions` is a collection of names or a predicate on a name."""
    problems = structure_problems(raw)
    raw, _ = _as_json(raw)
    if known_functions is not None and isinstance(raw, dict):
        problems += function_problems(build_nodes(raw.get("nodes")).values(), known_functions)
    return problems


def raise_problems(problems: list[str], name: str | None = None) -> None:
    """Raise InvalidInput listing `problems` (its `.problems`), if there are any."""
    if not problems:
        return
    subject = f"Graph workflow {name!r}" if name else "The graph definition"
    count = f"{len(problems)} problem" + ("s" if len(problems) > 1 else "")
    message = "\n".join([f"{subject} is invalid ({count}):", *(f"- {p}" for p in problems)])
    raise InvalidInput(message, problems=problems)


def build_nodes(raw_nodes: Any) -> dict[str, GraphNode]:
    """The well-formed nodes of `raw_nodes` by id, sorted by id (plans order by id: stored
    JSON does not keep key order)."""
    if not isinstance(raw_nodes, dict):
        return {}
    node_ids = {key for key in raw_nodes if isinstance(key, str)}
    return {
        node_id: build_node(node_id, raw_nodes[node_id], node_ids)
        for node_id in sorted(node_ids)
        if isinstance(raw_nodes[node_id], dict)
    }


def _as_json(raw: Any) -> tuple[Any, bool]:
    """The definition as it will be stored (tuples become lists) and True; as given and False
    when it is not storable, so the node checks can say where (NestedTooDeeply: nothing may
    walk it)."""
    try:
        return round_trip(raw), True
    except NestedTooDeeply:
        raise
    except NotStorableJson:
        return raw, False


def _node_id_problems(raw_nodes: dict[Any, Any]) -> list[str]:
    problems = []
    for node_id in raw_nodes:
        if not isinstance(node_id, str) or not node_id.strip():
            problems.append(f"a node id must be a non-empty string, not {node_id!r}")
        elif RESERVED_KEY_CHARACTERS.search(node_id):
            problems.append(f"node id {node_id!r} uses a reserved character (# : [ ])")
        elif node_id in BUILTIN_ROOTS:
            problems.append(f"node id {node_id!r} is reserved for references")
        elif len(node_id) > NODE_ID_MAX_LENGTH:
            problems.append(f"node id {node_id[:20]!r}... is over {NODE_ID_MAX_LENGTH} characters")
    return problems


def _entry(value: Any, node_ids: Collection[str]) -> tuple[tuple[str, ...], list[str]]:
    """The known entry nodes, and the problems with `entry`."""
    if value is None or value == [] or value == "":
        return (), ["no entry: set 'entry' to a node id or a list of node ids"]
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return (), [f"entry must be a node id or a list of node ids, not {value!r}"]
    problems = [f"entry names unknown node {e!r}" for e in entries if e not in node_ids]
    return tuple(dict.fromkeys(e for e in entries if e in node_ids)), problems
