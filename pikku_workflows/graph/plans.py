"""What the graph planner decides: the node instances to start now (`Fire`) and what the run
does next (`Plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..exceptions import InvalidInput

GRAPH_NODE_FAILED = "GRAPH_NODE_FAILED"
GRAPH_MAX_VISITS = "GRAPH_MAX_VISITS"
INVALID_INPUT = InvalidInput.code


@dataclass(frozen=True)
class Fire:
    """One node instance to start now.

    `key`: its step key (`a`, `a#1`, `h[0]`, `x:onError`); `node`: the node whose options
    (function or approval, retries, retry_delay) it runs with; `input`: its resolved step
    data; `from_key`: the instance that fired it, to store as `from_step_key` (None for an
    entry; for a join, the instance of its first predecessor by id; for an error handler,
    the instance that failed); `item`: the for_each index, else None; `approval`: an
    approval node's options with `data` resolved, else None.
    """

    key: str
    node: str
    input: Any
    from_key: str | None
    item: int | None = None
    approval: dict[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    """What the run does next.

    `fire`: every instance startable now, in key order (a parallel fan-out is one plan);
    after a node failed, only its error handlers. `completed`: nothing in flight and nothing
    fireable: the run completes with `output`, a dict `{node id: result}` of the nodes where
    a path ended (no `next`, or a branching `next` with no branch chosen; a revisited node's
    latest visit), sorted by id; None unless completed. `failure`: the run's error `{code,
    message, step_key}`, else None: GRAPH_NODE_FAILED (`step_key` the exhausted instance),
    GRAPH_MAX_VISITS (the instance whose back edge would exceed the bound), INVALID_INPUT (a
    for_each source that is no list or longer than its cap, a branch `next` does not name, a
    node reading a result that will never exist; `step_key` the instance, or the node id when
    it has none); of several, the first in key order. `in_flight`: keys of steps started and
    not settled, a failed step with attempts left included. `blocked`: nodes due to fire that
    wait for the result of a node they read.
    """

    fire: tuple[Fire, ...]
    completed: bool
    output: Any
    failure: dict[str, Any] | None
    in_flight: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()


def failure(code: str, message: str, step_key: str) -> dict[str, Any]:
    return {"code": code, "message": message, "step_key": step_key}
