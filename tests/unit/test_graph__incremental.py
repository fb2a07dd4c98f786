"""The planner a pass keeps (`Planner`, told the rows each round moved) plans exactly as planning
every row at once, and its work per plan does not grow with the run."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from pikku_workflows.graph import NodeState, Planner, SettledItems, plan
from pikku_workflows.status import StepStatus
from tests.graph_support import fn, graph, step

SHAPES: dict[str, dict[str, Any]] = {
    "diamond": {"a": fn(["b", "c"]), "b": fn("d"), "c": fn("d"), "d": fn()},
    "branches": {
        "route": fn({"vip": "gift", "std": ["mail", "survey"]}),
        "gift": fn(),
        "mail": fn(),
        "survey": fn(),
    },
    "cycle": {
        "start": fn("a"),
        "a": fn({"retry": "b", "done": "c"}, max_visits=4),
        "b": fn("a"),
        "c": fn(input={"last": {"$ref": "a"}}),
    },
    "self_loop": {"poll": fn({"again": "poll", "ready": "use"}, max_visits=5), "use": fn()},
    "parallel_fan": {
        "list": fn("handle"),
        "handle": fn("total", for_each={"$ref": "list"}),
        "total": fn(),
    },
    "sequential_fan": {
        "list": fn(["handle", "side"]),
        "handle": fn("join", for_each={"$ref": "list"}, mode="sequential", on_error="undo"),
        "side": fn("join"),
        "join": fn(),
        "undo": fn(),
    },
    "errors": {
        "charge": fn(["ship", "note"], on_error="refund"),
        "ship": fn(),
        "note": fn(input={"$ref": "charge"}),
        "refund": fn(),
    },
    "reads_a_fan": {
        "start": fn(["x_pre", "f_pre"]),
        "x_pre": fn("x"),
        "f_pre": fn("fan"),
        "fan": fn(for_each={"$ref": "trigger"}),
        "x": fn(input={"$ref": "fan"}),
    },
}
BRANCHES = {"route": ["vip", "std"], "a": ["retry", "done"], "poll": ["again", "ready"]}


def _settle(rng: random.Random, state: NodeState) -> NodeState:
    """The row's next move: a retry starts, or the attempt succeeds or fails."""
    if state.status == StepStatus.FAILED:
        return replace(state, status=StepStatus.RUNNING, attempt=state.attempt + 1)
    if rng.random() < 0.2:
        return replace(state, status=StepStatus.FAILED, error={"message": "no"})
    node = state.key.split("[")[0].split("#")[0]
    result: Any = [rng.randint(0, 9) for _ in range(rng.randint(0, 4))] if node == "list" else 1
    branch = rng.choice(BRANCHES[node]) if node in BRANCHES else None
    return replace(state, status=StepStatus.SUCCEEDED, result=result, branch_taken=branch)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_planner__kept_between_rounds_plans_as_all_the_rows_at_once(shape):
    definition = graph(SHAPES[shape], entry="poll" if shape == "self_loop" else None)
    for seed in range(40):
        rng = random.Random(seed)
        rows: dict[str, NodeState] = {}
        planner = Planner(definition, [1, 2, 3])
        for _ in range(60):
            decided = planner.plan()
            assert decided == plan(definition, [1, 2, 3], list(rows.values())), (shape, seed)
            if decided.completed or decided.failure is not None:
                break
            moved = [step(f.key, "running", from_key=f.from_key, limit=2) for f in decided.fire]
            in_flight = list(decided.in_flight)
            for key in rng.sample(in_flight, rng.randint(0, len(in_flight))):
                moved.append(_settle(rng, rows[key]))
            rows.update((state.key, state) for state in moved)
            planner.record(moved)


class _CountedState(NodeState):
    """A row that counts how often the planner reads its status."""

    reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "status":
            _CountedState.reads += 1
        return super().__getattribute__(name)


def _reads_to_plan_the_next_item(done: int) -> int:
    definition = graph(
        {"list": fn("each"), "each": fn(for_each={"$ref": "list"}, mode="sequential")}
    )
    rows = [step("list", result=list(range(done + 10)))]
    rows += [step(f"each[{i}]", result=i, from_key="list") for i in range(done)]
    planner = Planner(definition, None, rows, max_items=done + 10)
    assert [fire.key for fire in planner.plan().fire] == [f"each[{done}]"]
    planner.record([step(f"each[{done}]", "running", from_key="list")])
    planner.plan()
    _CountedState.reads = 0
    planner.record([_CountedState(f"each[{done}]", "succeeded", 1, 1, done, None, "list")])
    assert [fire.key for fire in planner.plan().fire] == [f"each[{done + 1}]"]
    return _CountedState.reads


def test_planner__the_work_of_one_more_item_does_not_grow_with_the_run():
    assert _reads_to_plan_the_next_item(100) == _reads_to_plan_the_next_item(10_000)


def test_planner__a_row_that_went_back_replans_from_the_entries():
    definition = graph({"a": fn("b"), "b": fn()})
    planner = Planner(definition, None, [step("a"), step("b", from_key="a")])
    assert planner.plan().completed

    planner.record([step("b", "running", from_key="a", attempt=2, limit=3)])

    assert planner.plan() == plan(definition, None, [step("a"), step("b", "running", limit=3)])
    assert planner.plan().in_flight == ("b",)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_planner__items_given_as_a_count_plan_as_their_rows(mode):
    definition = graph(
        {"each": fn("after", for_each={"$ref": "trigger"}, mode=mode), "after": fn()}
    )
    trigger = list(range(8))
    done = [step(f"each[{i}]", result=i * 10) for i in range(5)]
    settled = {"each": SettledItems(5, lambda: [i * 10 for i in range(5)])}
    rest = [step("each[5]", "running"), step("each[7]", "failed", attempt=1, limit=2)]

    counted = Planner(definition, trigger, rest, settled_items=settled)
    assert counted.plan() == plan(definition, trigger, done + rest)
    finished = [step(f"each[{i}]", result=i * 10) for i in range(5, 8)]
    counted.record(finished)
    assert counted.plan() == plan(definition, trigger, done + finished)
    assert counted.plan().fire[0].input == [i * 10 for i in range(8)]
