"""Helpers for graph runs through the engine: step functions that record their calls (in-process
and queued twins), and reads of what a graph run recorded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pikku_workflows as pw
from pikku_workflows.models import WorkflowStep


@dataclass
class Calls:
    """What the graph step functions saw: (step key, data, attempt) in call order."""

    seen: list[tuple[str, Any, int]] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [key for key, _, _ in self.seen]

    def data_of(self, key: str) -> Any:
        return next(data for seen, data, _ in self.seen if seen == key)


def register_graph_functions(calls: Calls) -> None:
    """`g.<name>` (in-process) and `g.q_<name>` (queued, inline=False) for each behaviour."""

    def echo(data: Any, ctx: pw.StepContext) -> Any:
        return data

    def pick(data: Any, ctx: pw.StepContext) -> Any:
        # data: {"branch": name, ...}: choose that branch, return the data.
        ctx.branch(data["branch"])
        return data

    def increment(data: Any, ctx: pw.StepContext) -> Any:
        # A loop body: count up; branch "again" below `until`, "done" at it.
        n = (data or {}).get("n", 0) + 1
        until = (data or {}).get("until", 3)
        ctx.branch("again" if n < until else "done")
        return {"n": n, "until": until}

    def fail(data: Any, ctx: pw.StepContext) -> Any:
        raise ConnectionError(f"down on attempt {ctx.attempt}")

    def flaky(data: Any, ctx: pw.StepContext) -> Any:
        # Fails its first `fail_times` attempts.
        if ctx.attempt <= data["fail_times"]:
            raise ConnectionError(f"flaky attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}

    behaviours: dict[str, Callable[[Any, pw.StepContext], Any]] = {
        "echo": echo,
        "pick": pick,
        "increment": increment,
        "fail": fail,
        "flaky": flaky,
    }
    for name, behaviour in behaviours.items():
        recorded = _recording(calls, behaviour)
        pw.step_function(f"g.{name}")(recorded)
        pw.step_function(f"g.q_{name}", inline=False)(_recording(calls, behaviour))


def _recording(
    calls: Calls, behaviour: Callable[[Any, pw.StepContext], Any]
) -> Callable[[Any, pw.StepContext], Any]:
    def step_function(data: Any, ctx: pw.StepContext) -> Any:
        calls.seen.append((ctx.step_key, data, ctx.attempt))
        return behaviour(data, ctx)

    step_function.__qualname__ = f"{behaviour.__name__}_{id(step_function)}"
    return step_function


def graph_steps(run_id: str) -> list[tuple[str, str, str | None]]:
    """(step key, status, from_step_key) of every step of the run, in creation order."""
    return list(
        WorkflowStep.objects.filter(run_id=run_id)
        .order_by("created_at", "step_key")
        .values_list("step_key", "status", "from_step_key")
    )


def step_keys(run_id: str) -> list[str]:
    return [key for key, _, _ in graph_steps(run_id)]


def lineage(run_id: str, key: str) -> list[str]:
    """The instances that led to `key`, walking `from_step_key` back to the entry."""
    by_key = {k: parent for k, _, parent in graph_steps(run_id)}
    path = [key]
    while by_key.get(path[-1]):
        path.append(by_key[path[-1]])  # type: ignore[arg-type]
    return list(reversed(path))
