"""Graph workflows, the pure core: definitions (parse, validate, hash), input resolution and
the planner. Nothing here touches the database; the engine runs what the planner decides."""

from __future__ import annotations

from .definition import (
    GraphDefinition,
    canonical_json,
    definition_hash,
    load_definition_file,
    parse_definition,
    read_definition_file,
)
from .inputs import Scope, resolve, resolve_node_input
from .nodes import GraphNode
from .planner import DEFAULT_MAX_ITEMS, Planner, plan
from .plans import GRAPH_MAX_VISITS, GRAPH_NODE_FAILED, Fire, Plan
from .snapshot import NodeState, SettledItems
from .validation import definition_problems, function_problems, structure_problems

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "GRAPH_MAX_VISITS",
    "GRAPH_NODE_FAILED",
    "Fire",
    "GraphDefinition",
    "GraphNode",
    "NodeState",
    "Plan",
    "Planner",
    "Scope",
    "SettledItems",
    "canonical_json",
    "definition_hash",
    "definition_problems",
    "function_problems",
    "load_definition_file",
    "parse_definition",
    "plan",
    "read_definition_file",
    "resolve",
    "resolve_node_input",
    "structure_problems",
]
