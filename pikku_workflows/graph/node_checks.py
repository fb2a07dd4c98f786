"""Checks of one node's options (types, names it refers to, durations, bounds), each problem
a sentence; the graph-wide rules live in `graph_rules`."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..durations import parse_duration
from ..exceptions import InvalidInput
from ..retry import EXPONENTIAL
from ..serialization import NotStorableJson, round_trip
from .approval_options import approval_problems, outcome_branch_problems
from .nodes import MAX_ITEMS_LIMIT, MAX_VISITS_LIMIT, MODES, RETRIES_LIMIT
from .references import (
    BUILTIN_ROOTS,
    ITEM,
    PATH,
    REF,
    TEMPLATE,
    ReadableRoots,
    is_ref,
    is_template,
    template_candidates,
    template_expressions,
)

NODE_OPTIONS = frozenset(
    {
        "function",
        "approval",
        "next",
        "input",
        "retries",
        "retry_delay",
        "on_error",
        "for_each",
        "mode",
        "max_items",
        "max_visits",
        "description",
    }
)


def node_problems(node_id: str, node: Any, node_ids: Collection[str]) -> list[str]:
    """Every problem with one node's options, each prefixed with the node's id."""
    if not isinstance(node, dict):
        return [f"node {node_id!r}: a node is an object of options, not {node!r}"]
    unknown = sorted(set(node) - NODE_OPTIONS, key=str)
    problems = [f"unknown options {unknown}"] if unknown else []
    problems += _action_problems(node, node_ids)
    if "next" in node:
        problems += _next_problems(node["next"], node_ids)
    if "input" in node:
        problems += data_problems("input", node["input"], node_ids, "for_each" in node)
    problems += _retry_problems(node)
    if "on_error" in node:
        problems += _on_error_problems(node_id, node["on_error"], node_ids)
    problems += _fan_out_problems(node, node_ids)
    problems += _max_visits_problems(node)
    if not isinstance(node.get("description", ""), str):
        problems.append(f"description must be a string, not {node['description']!r}")
    return [f"node {node_id!r}: {problem}" for problem in problems]


def _action_problems(node: dict[str, Any], node_ids: Collection[str]) -> list[str]:
    has_function, has_approval = "function" in node, "approval" in node
    if has_function == has_approval:
        return [
            "has both 'function' and 'approval': a node is one or the other"
            if has_function
            else "needs 'function' (a step function name) or 'approval' (wf.approval options)"
        ]
    if has_function:
        function = node["function"]
        if not isinstance(function, str) or not function.strip():
            return [f"function must be a step function name, not {function!r}"]
        return []
    problems = approval_problems(node["approval"]) + outcome_branch_problems(node.get("next"))
    if isinstance(node["approval"], dict) and "data" in node["approval"]:
        problems += data_problems("approval.data", node["approval"]["data"], node_ids, False)
    return problems


def _next_problems(value: Any, node_ids: Collection[str]) -> list[str]:
    if isinstance(value, dict):
        problems = []
        for branch, targets in value.items():
            if not isinstance(branch, str) or not branch.strip():
                problems.append(f"next: a branch name must be a non-empty string, not {branch!r}")
            problems += _target_problems(f"next[{branch!r}]", targets, node_ids)
        return problems
    return _target_problems("next", value, node_ids)


def _target_problems(where: str, value: Any, node_ids: Collection[str]) -> list[str]:
    targets = [value] if isinstance(value, str) else value
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return [f"{where} must be a node id, a list of node ids or {{branch: ids}}, not {value!r}"]
    return [f"{where} names unknown node {t!r}" for t in targets if t not in node_ids]


def data_problems(where: str, value: Any, node_ids: Collection[str], has_item: bool) -> list[str]:
    """Problems with JSON that may hold `$ref`s and `$template`s (an input, approval data)."""
    try:
        round_trip(value)
    except NotStorableJson as exc:
        return [f"{where} is not storable JSON: {exc}"]
    return list(_walk_data(where, value, node_ids, has_item))


def _walk_data(where: str, value: Any, node_ids: Collection[str], has_item: bool) -> list[str]:
    if is_ref(value):
        return ref_problems(where, value, node_ids, has_item)
    if is_template(value):
        return _template_problems(where, value, node_ids, has_item)
    if isinstance(value, dict):
        items = [(f"{where}.{key}", item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{where}[{index}]", item) for index, item in enumerate(value)]
    else:
        return []
    return [p for path, item in items for p in _walk_data(path, item, node_ids, has_item)]


def ref_problems(
    where: str, value: dict[str, Any], node_ids: Collection[str], has_item: bool
) -> list[str]:
    """Problems with one `{"$ref": ..., "path": ...}`."""
    problems = []
    extra = sorted(set(value) - {REF, PATH}, key=str)
    if extra:
        problems.append(f"{where}: a $ref takes only 'path' beside it, not {extra}")
    root, path = value[REF], value.get(PATH)
    if not isinstance(root, str):
        problems.append(f"{where}: $ref must name a node, 'trigger' or '$item', not {root!r}")
    elif root == ITEM and not has_item:
        problems.append(f"{where}: $item exists only in the input of a node with for_each")
    elif root not in node_ids and root not in BUILTIN_ROOTS:
        problems.append(f"{where}: $ref names unknown node {root!r}")
    if path is not None and (not isinstance(path, str) or not all(path.split("."))):
        problems.append(f"{where}: path must be dotted keys like 'user.name', not {path!r}")
    return problems


def _template_problems(
    where: str, value: dict[str, Any], node_ids: Collection[str], has_item: bool
) -> list[str]:
    template = value[TEMPLATE]
    if not isinstance(template, str) or len(value) > 1:
        return [f"{where}: a $template is {{'$template': 'text with {{{{ node.path }}}}'}}"]
    roots = ReadableRoots(node_ids)
    problems = []
    for expression in template_expressions(template):
        shown = f"'{{{{ {expression} }}}}'"
        readings = template_candidates(expression, roots)
        if not expression or not all(expression.split(".")):
            problems.append(f"{where}: template expression {shown} is not node.path")
        elif not readings:
            head = expression.split(".")[0]
            problems.append(f"{where}: template expression {shown} names unknown node {head!r}")
        elif len(readings) > 1:
            roots_read = [reading.root for reading in readings]
            problems.append(f"{where}: template expression {shown} is ambiguous: {roots_read}")
        elif readings[0].root == ITEM and not has_item:
            problems.append(f"{where}: $item exists only in the input of a node with for_each")
    return problems


def _retry_problems(node: dict[str, Any]) -> list[str]:
    problems = []
    retries = node.get("retries")
    if "retries" in node and (
        isinstance(retries, bool)
        or not isinstance(retries, int)
        or not 0 <= retries <= RETRIES_LIMIT
    ):
        problems.append(f"retries must be an int from 0 to {RETRIES_LIMIT}, not {retries!r}")
    delay: Any = node.get("retry_delay")
    if "retry_delay" in node and delay != EXPONENTIAL:
        try:
            parse_duration(delay)
        except InvalidInput as exc:
            problems.append(f"retry_delay: {exc.message} (or 'exponential')")
    return problems


def _on_error_problems(node_id: str, handler: Any, node_ids: Collection[str]) -> list[str]:
    if not isinstance(handler, str):
        return [f"on_error must name a node, not {handler!r}"]
    if handler not in node_ids:
        return [f"on_error names unknown node {handler!r}"]
    if handler == node_id:
        return ["on_error names the node itself"]
    return []


def _fan_out_problems(node: dict[str, Any], node_ids: Collection[str]) -> list[str]:
    problems = []
    if "for_each" in node:
        source = node["for_each"]
        if is_ref(source):
            problems += ref_problems("for_each", source, node_ids, False)
        else:
            problems.append(f"for_each must be a $ref to a list ({{'$ref': ...}}), not {source!r}")
    if "mode" in node:
        if "for_each" not in node:
            problems.append("mode is set without for_each")
        if node["mode"] not in MODES:
            problems.append(f"mode must be one of {list(MODES)}, not {node['mode']!r}")
    if "max_items" in node:
        if "for_each" not in node:
            problems.append("max_items is set without for_each")
        value = node["max_items"]
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 1 <= value <= MAX_ITEMS_LIMIT
        ):
            problems.append(f"max_items must be an int from 1 to {MAX_ITEMS_LIMIT}, not {value!r}")
    return problems


def _max_visits_problems(node: dict[str, Any]) -> list[str]:
    value = node.get("max_visits")
    if "max_visits" in node and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VISITS_LIMIT
    ):
        return [f"max_visits must be an int from 1 to {MAX_VISITS_LIMIT}, not {value!r}"]
    return []
