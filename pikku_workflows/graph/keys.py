"""Step keys of graph node instances: `node`, `node#N` (visit N+1), `node[i]` (for_each item i)
and `<key>:onError` (the error handler fired when the instance `<key>` exhausted its attempts)."""

from __future__ import annotations

import re
from dataclasses import dataclass

HANDLER_SUFFIX = ":onError"

# Node ids cannot hold `# : [ ]`, so a key splits into its parts without ambiguity.
_INSTANCE_KEY = re.compile(
    r"^(?P<node>[^#:\[\]]+)(?:#(?P<visit>[1-9][0-9]*))?(?:\[(?P<item>0|[1-9][0-9]*)\])?$"
)


@dataclass(frozen=True)
class InstanceKey:
    """A parsed instance key: `visit` 0 is the first visit (the bare id); `item` is the
    for_each index or None."""

    node: str
    visit: int = 0
    item: int | None = None


def visit_key(node: str, visit: int) -> str:
    """The key of a node's visit: the bare id first, then `node#1`, `node#2`, ..."""
    return node if visit == 0 else f"{node}#{visit}"


def item_key(visit: str, item: int) -> str:
    return f"{visit}[{item}]"


def handler_key(failed_key: str) -> str:
    return f"{failed_key}{HANDLER_SUFFIX}"


def handled_key(key: str) -> str | None:
    """The instance key an error handler's key handles, or None for any other key."""
    if not key.endswith(HANDLER_SUFFIX):
        return None
    handled = key[: -len(HANDLER_SUFFIX)]
    return handled if parse_instance_key(handled) is not None else None


def parse_instance_key(key: str) -> InstanceKey | None:
    """Split a node instance's key; None for handler keys and keys no graph node makes."""
    match = _INSTANCE_KEY.match(key)
    if match is None:
        return None
    item = match.group("item")
    return InstanceKey(
        node=match.group("node"),
        visit=int(match.group("visit") or 0),
        item=None if item is None else int(item),
    )


def instance_order(key: str) -> tuple[str, int, int, int]:
    """A sort key that orders instances by node id, visit, then item (numerically: h[2] < h[10]);
    a handler sorts right after the instance it handles."""
    handled = handled_key(key)
    parsed = parse_instance_key(handled if handled is not None else key)
    if parsed is None:
        return (key, 0, -1, 0)
    item = -1 if parsed.item is None else parsed.item
    return (parsed.node, parsed.visit, item, 0 if handled is None else 1)
