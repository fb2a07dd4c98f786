"""The step-key grammar: the keys the engine makes from the body's own (`name#N` ordinals,
`<key>:onError` handlers, `<key>:compensate` compensations, `node[i]` for_each items and
`wf.map` items, `__suspend:`/`__patch:` markers), and their parse. User keys and node ids
cannot hold the characters these reserve."""

from __future__ import annotations

import re
from dataclasses import dataclass

RESERVED_KEY_CHARACTERS = re.compile(r"[#:\[\]]")

# Every key the engine makes for itself (handlers, suspends, patch markers) holds a `:`, which
# user keys cannot: a database filter can tell them from the body's keys by that alone.
ENGINE_KEY_MARK = ":"

HANDLER_SUFFIX = ":onError"
COMPENSATION_SUFFIX = ":compensate"
SUSPEND_PREFIX = "__suspend:"
PATCH_PREFIX = "__patch:"

# Node ids cannot hold `# : [ ]`, so a key splits into its parts without ambiguity.
_INSTANCE_KEY = re.compile(
    r"^(?P<node>[^#:\[\]]+)(?:#(?P<visit>[1-9][0-9]*))?(?:\[(?P<item>0|[1-9][0-9]*)\])?$"
)


def ordinal_key(logical: str, ordinal: int) -> str:
    """The key of the body's reach `ordinal` (0 first) of a key, or a graph node's visit: the
    bare key first, then `key#1`, `key#2`, ..."""
    return logical if ordinal == 0 else f"{logical}#{ordinal}"


def item_key(visit: str, item: int) -> str:
    """The key of item `item` of a for_each node's visit `visit`, or of a `wf.map` reach."""
    return f"{visit}[{item}]"


def names_an_item(key: str) -> bool:
    """Whether the key is (or handles) a for_each item's instance."""
    return "[" in key


def handler_key(failed_key: str) -> str:
    """The key of the `on_error` handler run once the step `failed_key` exhausted its attempts."""
    return f"{failed_key}{HANDLER_SUFFIX}"


def is_handler_key(key: str) -> bool:
    return key.endswith(HANDLER_SUFFIX)


def handled_step_key(key: str) -> str | None:
    """The key of the step an `on_error` handler's key handles, or None for any other key."""
    return key.removesuffix(HANDLER_SUFFIX) if is_handler_key(key) else None


def handled_key(key: str) -> str | None:
    """The graph node instance an error handler's key handles, or None for any other key."""
    handled = handled_step_key(key)
    return handled if handled is not None and parse_instance_key(handled) is not None else None


def compensation_key(step_key: str) -> str:
    """The key of the step that undoes the succeeded step `step_key` (its `compensate=`)."""
    return f"{step_key}{COMPENSATION_SUFFIX}"


def compensated_step_key(key: str) -> str | None:
    """The key of the step a compensation's key undoes, or None for any other key."""
    return key.removesuffix(COMPENSATION_SUFFIX) if key.endswith(COMPENSATION_SUFFIX) else None


def suspend_step_key(reason: str) -> str:
    """The logical key a `wf.suspend(reason)` records its step under."""
    return f"{SUSPEND_PREFIX}{reason}"


def suspend_reason(key: str) -> str | None:
    """The reason of a `wf.suspend` step's key, or None for any other key."""
    return key.removeprefix(SUSPEND_PREFIX) if key.startswith(SUSPEND_PREFIX) else None


def patch_marker_key(patch_id: str) -> str:
    """The key of the marker step a patch records when a run takes its new branch."""
    return f"{PATCH_PREFIX}{patch_id}"


def is_patch_marker_key(key: str) -> bool:
    return key.startswith(PATCH_PREFIX)


def is_engine_key(step_key: str) -> bool:
    """A step the engine made itself (an `on_error` handler, a compensation, a `wf.suspend`),
    not one the body named: no fork starts from it."""
    return (
        step_key.startswith(SUSPEND_PREFIX)
        or is_handler_key(step_key)
        or compensated_step_key(step_key) is not None
    )


@dataclass(frozen=True)
class InstanceKey:
    """A parsed graph node instance key: `visit` 0 is the first visit (the bare id); `item` is
    the for_each index or None."""

    node: str
    visit: int = 0
    item: int | None = None


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
