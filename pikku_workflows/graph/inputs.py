"""Resolving a node's `input` into the data its step receives: `$ref`s, `$template`s and the
default input of a node written without one.

Choices, documented here once:
- `{"$ref": root, "path": "a.b"}` is the root's value (`trigger`: the run input; `$item`: the
  for_each element; a node id: that node's result, the latest visit's for a revisited node, the
  ordered item results for a for_each node), then one key per path segment (a digit segment
  indexes a list). A path that leads nowhere gives None, never an error.
- `$template` gives a string: each `{{ expr }}` is replaced by the value `expr` names (same
  rules as a `$ref`); a missing value or null gives "", a string is inserted as is, and any
  other value as JSON (`true`, `3`, `{"a": 1}`), so a template reads the same on every worker.
- Dicts and lists are resolved item by item; anything else is returned unchanged.
- Without `input`, a node receives the output of what fired it: an entry node the run input,
  a for_each item its element, a node fired by one instance that instance's result, and a
  join (several forward predecessors) a dict `{predecessor id: its result}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from .nodes import GraphNode
from .references import (
    BUILTIN_ROOTS,
    ITEM,
    TEMPLATE,
    TRIGGER,
    Reference,
    is_ref,
    is_template,
    ref_reference,
    template_candidates,
    template_parts,
)

_MISSING: Any = object()
_LIST_INDEX = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Scope:
    """What references resolve against: the run input, the results of succeeded nodes by
    node id, the current for_each element (`has_item` False outside a for_each), and the
    graph's node ids (a template's `{{ a.b }}` is read against all of them, run or not)."""

    trigger: Any
    results: Mapping[str, Any] = field(default_factory=dict)
    item: Any = None
    has_item: bool = False
    node_ids: Collection[str] = ()

    @property
    def roots(self) -> Collection[str]:
        return set(self.node_ids) | set(self.results) | BUILTIN_ROOTS


def resolve_node_input(node: GraphNode, scope: Scope, default: Any) -> Any:
    """The step data of one instance: its resolved `input`, or `default` (what fired it)."""
    return resolve(node.input, scope) if node.has_input else default


def resolve(value: Any, scope: Scope) -> Any:
    """`value` with every `$ref` and `$template` inside it replaced."""
    if is_ref(value):
        return lookup(scope, ref_reference(value))
    if is_template(value):
        return render_template(value[TEMPLATE], scope)
    if isinstance(value, dict):
        return {key: resolve(item, scope) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, scope) for item in value]
    return value


def lookup(scope: Scope, reference: Reference) -> Any:
    """The value a reference names, or None when its root or path leads nowhere."""
    value = _root_value(scope, reference.root)
    for segment in reference.path:
        value = _child(value, segment)
    return None if value is _MISSING else value


def render_template(template: str, scope: Scope) -> str:
    parts = template_parts(template)
    for index in range(1, len(parts), 2):
        readings = template_candidates(parts[index], scope.roots)
        value = lookup(scope, readings[-1]) if readings else None
        parts[index] = _as_text(value)
    return "".join(parts)


def _root_value(scope: Scope, root: str) -> Any:
    if root == TRIGGER:
        return scope.trigger
    if root == ITEM:
        return scope.item if scope.has_item else _MISSING
    return scope.results.get(root, _MISSING)


def _child(value: Any, segment: str) -> Any:
    if isinstance(value, dict):
        return value.get(segment, _MISSING)
    if isinstance(value, list) and _LIST_INDEX.match(segment) and int(segment) < len(value):
        return value[int(segment)]
    return _MISSING


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
