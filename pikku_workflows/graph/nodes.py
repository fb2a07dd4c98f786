"""A graph node as the planner reads it (`GraphNode`), built from its JSON options."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ..retry import RetryPolicy
from .references import (
    ReadableRoots,
    Reference,
    is_ref,
    is_well_formed_ref,
    ref_reference,
    references_in,
)

DEFAULT_MAX_VISITS = 10
MAX_VISITS_LIMIT = 1000
# A node's own `max_items` may raise the fan-out cap (MAX_FAN_OUT) up to this many items.
MAX_ITEMS_LIMIT = 1_000_000
RETRIES_LIMIT = 1000
PARALLEL = "parallel"
SEQUENTIAL = "sequential"
MODES = (PARALLEL, SEQUENTIAL)


@dataclass(frozen=True)
class GraphNode:
    """One node of a graph definition (treat its dicts as read-only).

    `next`: every target `next` names, branches included, in written order; `branches`: the
    `{branch: targets}` of a branching node, None when `next` fires unconditionally;
    `has_input`: whether `input` was given (an explicit null is an input); `for_each`: the
    reference to the list it fans out over; `max_items`: how long that list may be (None: the
    MAX_FAN_OUT setting decides); `depends_on`: the nodes whose results its
    input, for_each or approval data read (they must have succeeded before it fires).
    """

    id: str
    function: str | None = None
    approval: dict[str, Any] | None = None
    next: tuple[str, ...] = ()
    branches: dict[str, tuple[str, ...]] | None = None
    input: Any = None
    has_input: bool = False
    retries: int | None = None
    retry_delay: int | str | None = None
    on_error: str | None = None
    for_each: Reference | None = None
    mode: str = PARALLEL
    max_items: int | None = None
    max_visits: int = DEFAULT_MAX_VISITS
    depends_on: tuple[str, ...] = ()

    def targets(self, branch: str | None) -> tuple[str, ...] | None:
        """The nodes a succeeded instance fires: all of `next`, or the chosen branch's
        targets; () for a branching node that chose no branch; None for a branch `next`
        does not name (the planner fails the run)."""
        if self.branches is None:
            return self.next
        if branch is None:
            return ()
        return self.branches.get(branch)

    def retry_policy(self, default_retries: int) -> RetryPolicy:
        """The node's retries and delay as the engine stores them on its step rows."""
        return RetryPolicy.resolve(self.retries, self.retry_delay, default_retries)


def build_node(node_id: str, raw: dict[str, Any], node_ids: Collection[str]) -> GraphNode:
    """A GraphNode from its JSON options, leaving out what is malformed: validation reports
    that, and this lets it check the rest of the graph in the same pass."""
    branches = _branches(raw.get("next"), node_ids)
    if branches is None:
        next_nodes = _targets(raw.get("next"), node_ids)
    else:
        next_nodes = tuple(dict.fromkeys(t for targets in branches.values() for t in targets))
    approval = raw.get("approval") if isinstance(raw.get("approval"), dict) else None
    for_each = _for_each(raw.get("for_each"))
    return GraphNode(
        id=node_id,
        function=raw["function"] if isinstance(raw.get("function"), str) else None,
        approval=approval,
        next=next_nodes,
        branches=branches,
        input=raw.get("input"),
        has_input="input" in raw,
        retries=_bounded_int(raw.get("retries"), 0, RETRIES_LIMIT),
        retry_delay=_retry_delay(raw.get("retry_delay")),
        on_error=_on_error(raw.get("on_error"), node_id, node_ids),
        for_each=for_each,
        mode=raw["mode"] if raw.get("mode") in MODES else PARALLEL,
        max_items=_bounded_int(raw.get("max_items"), 1, MAX_ITEMS_LIMIT),
        max_visits=_bounded_int(raw.get("max_visits"), 1, MAX_VISITS_LIMIT) or DEFAULT_MAX_VISITS,
        depends_on=_dependencies(raw, approval, node_ids),
    )


def _targets(value: Any, node_ids: Collection[str]) -> tuple[str, ...]:
    candidates = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(dict.fromkeys(t for t in candidates if isinstance(t, str) and t in node_ids))


def _branches(value: Any, node_ids: Collection[str]) -> dict[str, tuple[str, ...]] | None:
    if not isinstance(value, dict):
        return None
    return {
        branch: _targets(targets, node_ids)
        for branch, targets in value.items()
        if isinstance(branch, str)
    }


def _for_each(value: Any) -> Reference | None:
    return ref_reference(value) if is_ref(value) and is_well_formed_ref(value) else None


def _on_error(value: Any, node_id: str, node_ids: Collection[str]) -> str | None:
    # A node handling its own failure is reported once, not again as a misused handler.
    return value if isinstance(value, str) and value in node_ids and value != node_id else None


def _bounded_int(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _retry_delay(value: Any) -> int | str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _dependencies(
    raw: dict[str, Any], approval: dict[str, Any] | None, node_ids: Collection[str]
) -> tuple[str, ...]:
    roots = ReadableRoots(node_ids)
    sources = [raw.get("input"), raw.get("for_each"), (approval or {}).get("data")]
    found = {ref.root for source in sources for ref in references_in(source, roots)}
    return tuple(sorted(root for root in found if root in node_ids))
