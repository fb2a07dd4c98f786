"""A graph workflow's definition: parsed from JSON (`parse_definition`, `load_definition_file`),
validated with every problem listed, and hashed over its canonical JSON."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import InvalidInput
from ..serialization import NotStorableJson, loads_json, round_trip
from .nodes import GraphNode
from .topology import Topology
from .validation import check_structure, raise_problems


@dataclass(frozen=True)
class GraphDefinition:
    """A validated graph. `entry`: entry node ids in written order; `nodes`: by id, sorted
    by id; `source`: the definition as JSON (what is stored and hashed); `hash`: its
    canonical hash; `topology`: its edges' shape (back edges, forward predecessors)."""

    entry: tuple[str, ...]
    nodes: dict[str, GraphNode]
    source: dict[str, Any]
    hash: str
    topology: Topology = field(compare=False, repr=False)

    def node(self, node_id: str) -> GraphNode:
        return self.nodes[node_id]


def canonical_json(value: Any) -> str:
    """Sorted keys and compact separators: the same definition written in any key order
    gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def definition_hash(source: Any) -> str:
    """The first 16 hex digits of the sha256 of the canonical JSON (like code_fingerprint)."""
    return hashlib.sha256(canonical_json(source).encode()).hexdigest()[:16]


def parse_definition(
    raw: Any, *, name: str | None = None, max_nodes: int | None = None
) -> GraphDefinition:
    """Validate the structure of `raw` (step function names aside: they may register later)
    and return it parsed; InvalidInput lists every problem (`.problems`). `max_nodes`: the
    most nodes it may have (None: any number, for a definition stored when it was registered)."""
    checked = check_structure(raw, max_nodes=max_nodes)
    raise_problems(checked.problems, name)
    try:
        source = checked.source if checked.storable else round_trip(checked.source)
    except NotStorableJson as exc:  # the nodes' JSON is checked; a top-level key may not be
        raise InvalidInput(problems=[f"the definition is not storable JSON: {exc}"]) from exc
    assert checked.topology is not None  # a definition without problems has its topology
    entry = source["entry"]
    return GraphDefinition(
        entry=tuple(dict.fromkeys([entry] if isinstance(entry, str) else entry)),
        nodes=checked.nodes,
        source=source,
        hash=definition_hash(source),
        topology=checked.topology,
    )


def read_definition_file(path: str | Path) -> tuple[str | None, dict[str, Any]]:
    """A definition file's `name` (None if absent) and the definition without it."""
    try:
        raw = loads_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"Cannot read the graph definition {str(path)!r}: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"The graph definition {str(path)!r} is not a JSON object.")
    name = raw.pop("name", None)
    if name is not None and not isinstance(name, str):
        raise InvalidInput(f"The graph definition {str(path)!r} has a name that is no string.")
    return name, raw


def load_definition_file(path: str | Path) -> GraphDefinition:
    """Parse a JSON file holding a definition (and optionally its workflow's `name`)."""
    name, raw = read_definition_file(path)
    return parse_definition(raw, name=name or Path(path).stem)
