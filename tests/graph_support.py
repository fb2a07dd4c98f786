"""Helpers for the graph planner's unit tests: step rows, and a driver that runs a graph by
planning, "executing" each fired node with a Python stand-in, and planning again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pikku_workflows.graph import (
    Fire,
    GraphDefinition,
    NodeState,
    Plan,
    Planner,
    parse_definition,
    plan,
)


def graph(nodes: dict[str, Any], entry: Any = None) -> GraphDefinition:
    """A parsed definition; the entry defaults to the first node written."""
    return parse_definition({"entry": entry or next(iter(nodes)), "nodes": nodes})


def fn(next_: Any = None, **options: Any) -> dict[str, Any]:
    """A function node's options (function "f"), with `next` when given."""
    node: dict[str, Any] = {"function": "f", **options}
    if next_ is not None:
        node["next"] = next_
    return node


def step(
    key: str,
    status: str = "succeeded",
    result: Any = None,
    *,
    branch: str | None = None,
    from_key: str | None = None,
    attempt: int = 1,
    limit: int = 1,
    error: dict[str, Any] | None = None,
    data: Any = None,
) -> NodeState:
    return NodeState(key, status, attempt, limit, result, branch, from_key, error, data)


def keys(fires: tuple[Fire, ...] | list[Fire]) -> list[str]:
    return [fire.key for fire in fires]


@dataclass(frozen=True)
class Branch:
    """What a stand-in returns to choose a branch (`ctx.branch`) along with its result."""

    name: str
    result: Any = None


class NodeError(Exception):
    """Raised by a stand-in: the attempt fails."""


@dataclass
class Driven:
    plan: Plan
    fired: list[Fire] = field(default_factory=list)
    steps: dict[str, NodeState] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        return keys(self.fired)


def drive(
    definition: GraphDefinition,
    trigger: Any,
    behaviours: Mapping[str, Callable[[Fire], Any]] | None = None,
    *,
    max_passes: int = 100,
) -> Driven:
    """Run the graph to its end: every fired node runs its stand-in (default: echo its input),
    one attempt each; a NodeError fails it. Returns the last plan and the firing order.

    Planned as a pass plans (one `Planner`, told the rows each round moved), and every plan is
    checked against planning all the rows at once."""
    behaviours = behaviours or {}
    planner = Planner(definition, trigger)
    driven = Driven(planner.plan())
    for _ in range(max_passes):
        if driven.plan.completed or driven.plan.failure is not None:
            return driven
        assert driven.plan.fire, f"stuck with nothing to fire: {driven.plan}"
        for fire in driven.plan.fire:
            driven.fired.append(fire)
            driven.steps[fire.key] = _execute(fire, behaviours.get(fire.node))
        planner.record(driven.steps[fire.key] for fire in driven.plan.fire)
        driven.plan = planner.plan()
        assert driven.plan == plan(definition, trigger, list(driven.steps.values()))
    raise AssertionError("the graph did not finish")


def _execute(fire: Fire, behaviour: Callable[[Fire], Any] | None) -> NodeState:
    try:
        outcome = behaviour(fire) if behaviour else fire.input
    except NodeError as exc:
        error = {"code": "STEP_FAILED", "message": str(exc)}
        return step(fire.key, "failed", from_key=fire.from_key, error=error, data=fire.input)
    branch = outcome.name if isinstance(outcome, Branch) else None
    result = outcome.result if isinstance(outcome, Branch) else outcome
    return step(fire.key, result=result, branch=branch, from_key=fire.from_key, data=fire.input)
