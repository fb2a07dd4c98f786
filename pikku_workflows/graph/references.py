"""The two ways a node's JSON points at other data, `{"$ref": node, "path": "a.b"}` and
`{"$template": "Hi {{ node.a.b }}"}`: recognising, parsing and listing them (pure)."""

from __future__ import annotations

import re
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import Any

REF = "$ref"
PATH = "path"
TEMPLATE = "$template"
TRIGGER = "trigger"
ITEM = "$item"
BUILTIN_ROOTS = frozenset({TRIGGER, ITEM})


@dataclass(frozen=True)
class ReadableRoots:
    """The names a reference may start with: the graph's node ids and the built-in roots,
    without copying the ids (a node's check stays constant in the graph's size)."""

    node_ids: Container[str]

    def __contains__(self, name: object) -> bool:
        return name in self.node_ids or name in BUILTIN_ROOTS


_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


@dataclass(frozen=True)
class Reference:
    """What a `$ref` or template expression names: a node id, `trigger` or `$item`, then a
    path of keys (list indexes are digits) into its value."""

    root: str
    path: tuple[str, ...] = ()


def is_ref(value: Any) -> bool:
    return isinstance(value, dict) and REF in value


def is_template(value: Any) -> bool:
    return isinstance(value, dict) and TEMPLATE in value


def parse_path(path: str | None) -> tuple[str, ...]:
    """`"a.b.0"` -> ("a", "b", "0"); no path means the whole value."""
    return tuple(path.split(".")) if path else ()


def is_well_formed_ref(value: dict[str, Any]) -> bool:
    """A `$ref` naming its root with a string, with a string `path` or none."""
    path = value.get(PATH)
    return isinstance(value[REF], str) and (path is None or isinstance(path, str))


def ref_reference(value: dict[str, Any]) -> Reference:
    return Reference(value[REF], parse_path(value.get(PATH)))


def template_expressions(template: str) -> list[str]:
    """The text inside each `{{ ... }}`, stripped."""
    return [match.group(1).strip() for match in _EXPRESSION.finditer(template)]


def template_candidates(expression: str, roots: Container[str]) -> list[Reference]:
    """Every reading of `a.b.c` whose head is a known root, shortest head first.

    Node ids may contain dots, so `{{ a.b.c }}` could name node `a` or node `a.b`;
    validation rejects a template with more than one reading.
    """
    segments = expression.split(".")
    readings = []
    for cut in range(1, len(segments) + 1):
        head = ".".join(segments[:cut])
        if head in roots:
            readings.append(Reference(head, tuple(segments[cut:])))
    return readings


def template_parts(template: str) -> list[str]:
    """The template split into literal text (even positions) and expressions (odd positions)."""
    parts = _EXPRESSION.split(template)
    return [part if index % 2 == 0 else part.strip() for index, part in enumerate(parts)]


def references_in(value: Any, roots: Container[str]) -> Iterator[Reference]:
    """Every reference inside `value`, depth first; a template expression with no reading is
    skipped (validation reports it), an ambiguous one yields its longest reading."""
    if is_ref(value):
        if is_well_formed_ref(value):
            yield ref_reference(value)
    elif is_template(value) and isinstance(value[TEMPLATE], str):
        for expression in template_expressions(value[TEMPLATE]):
            readings = template_candidates(expression, roots)
            if readings:
                yield readings[-1]
    elif isinstance(value, dict):
        for item in value.values():
            yield from references_in(item, roots)
    elif isinstance(value, list):
        for item in value:
            yield from references_in(item, roots)
