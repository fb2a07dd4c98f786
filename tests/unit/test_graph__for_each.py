from __future__ import annotations

from pikku_workflows.graph import plan
from tests.graph_support import NodeError, drive, fn, graph, keys, step

FAN = {
    "list": fn("handle"),
    "handle": fn("total", for_each={"$ref": "list", "path": "items"}),
    "total": fn(),
}


def test_for_each__parallel_fires_every_item_in_one_plan_with_its_element():
    result = plan(graph(FAN), None, [step("list", result={"items": ["x", "y", "z"]})])

    assert keys(result.fire) == ["handle[0]", "handle[1]", "handle[2]"]
    assert [f.input for f in result.fire] == ["x", "y", "z"]
    assert [f.item for f in result.fire] == [0, 1, 2]
    assert {f.from_key for f in result.fire} == {"list"}


def test_for_each__downstream_waits_for_every_item():
    steps = [
        step("list", result={"items": [1, 2]}),
        step("handle[0]", result=10, from_key="list"),
        step("handle[1]", "running", from_key="list"),
    ]

    result = plan(graph(FAN), None, steps)

    assert result.fire == () and not result.completed


def test_for_each__results_are_ordered_by_item_index():
    items = list(range(12))
    steps = [step("list", result={"items": items})]
    # Recorded out of order; h[10] sorts before h[2] as text, not as an index.
    steps += [step(f"handle[{i}]", result=i * 10, from_key="list") for i in reversed(items)]

    result = plan(graph(FAN), None, steps)

    assert keys(result.fire) == ["total"]
    assert result.fire[0].input == [i * 10 for i in items]
    assert result.fire[0].from_key == "handle"


def test_for_each__driven_run_fires_downstream_once():
    driven = drive(
        graph(FAN), None, {"list": lambda f: {"items": [1, 2, 3]}, "handle": lambda f: f.input * 2}
    )

    assert driven.order == ["list", "handle[0]", "handle[1]", "handle[2]", "total"]
    assert driven.plan.completed
    assert driven.plan.output == {"total": [2, 4, 6]}


def test_for_each__recorded_items_are_not_fired_again():
    steps = [
        step("list", result={"items": [1, 2]}),
        step("handle[0]", "running", from_key="list"),
        step("handle[1]", "pending", from_key="list"),
    ]

    result = plan(graph(FAN), None, steps)

    assert result.fire == ()
    assert result.in_flight == ("handle[0]", "handle[1]")


def test_for_each__sequential_runs_one_item_at_a_time():
    nodes = {**FAN, "handle": {**FAN["handle"], "mode": "sequential"}}
    definition = graph(nodes)
    listed = step("list", result={"items": ["x", "y"]})

    first = plan(definition, None, [listed])
    while_running = plan(definition, None, [listed, step("handle[0]", "running")])
    after_first = plan(definition, None, [listed, step("handle[0]", result=1)])

    assert keys(first.fire) == ["handle[0]"]
    assert while_running.fire == ()
    assert keys(after_first.fire) == ["handle[1]"]
    assert after_first.fire[0].input == "y"


def test_for_each__sequential_driven_never_has_two_items_in_flight():
    nodes = {**FAN, "handle": {**FAN["handle"], "mode": "sequential"}}
    driven = drive(graph(nodes), None, {"list": lambda f: {"items": [1, 2, 3]}})

    assert driven.order == ["list", "handle[0]", "handle[1]", "handle[2]", "total"]
    assert driven.plan.completed


def test_for_each__empty_list_completes_at_once_with_no_instances():
    result = plan(graph(FAN), None, [step("list", result={"items": []})])

    assert keys(result.fire) == ["total"]
    assert result.fire[0].input == []


def test_for_each__empty_list_as_the_last_node_completes_the_run():
    nodes = {"list": fn("handle"), "handle": fn(for_each={"$ref": "list"})}

    result = plan(graph(nodes), None, [step("list", result=[])])

    assert result.completed
    assert result.output == {"handle": []}


def test_for_each__a_source_that_is_no_list_fails_the_run():
    result = plan(graph(FAN), None, [step("list", result={"items": {"a": 1}})])

    assert result.fire == ()
    assert result.failure["code"] == "INVALID_INPUT"
    assert result.failure["step_key"] == "handle"
    assert "needs a list" in result.failure["message"] and "dict" in result.failure["message"]


def test_for_each__a_missing_source_fails_the_run():
    result = plan(graph(FAN), None, [step("list", result={})])

    assert "missing" in result.failure["message"]


def test_for_each__input_binds_item_and_reads_other_results():
    nodes = {
        **FAN,
        "handle": {
            **FAN["handle"],
            "input": {
                "name": {"$ref": "$item", "path": "name"},
                "line": {"$template": "{{ $item.name }} of {{ list.owner }}"},
            },
        },
    }
    listed = step("list", result={"owner": "ann", "items": [{"name": "pen"}, {"name": "ink"}]})

    result = plan(graph(nodes), None, [listed])

    assert [f.input for f in result.fire] == [
        {"name": "pen", "line": "pen of ann"},
        {"name": "ink", "line": "ink of ann"},
    ]


def test_for_each__chained_fan_outs_each_complete_in_order():
    nodes = {
        "list": fn("first"),
        "first": fn("second", for_each={"$ref": "list"}),
        "second": fn("sum", for_each={"$ref": "first"}),
        "sum": fn(),
    }
    driven = drive(
        graph(nodes),
        None,
        {
            "list": lambda f: [1, 2],
            "first": lambda f: f.input + 1,
            "second": lambda f: f.input * 10,
        },
    )

    assert driven.order == ["list", "first[0]", "first[1]", "second[0]", "second[1]", "sum"]
    assert driven.fired[-1].input == [20, 30]
    assert driven.plan.output == {"sum": [20, 30]}


def test_for_each__entry_fans_out_over_the_trigger():
    nodes = {"handle": fn("done", for_each={"$ref": "trigger", "path": "ids"}), "done": fn()}

    result = plan(graph(nodes), {"ids": [4, 5]}, [])

    assert keys(result.fire) == ["handle[0]", "handle[1]"]
    assert [f.input for f in result.fire] == [4, 5]
    assert {f.from_key for f in result.fire} == {None}


def test_for_each__a_failing_item_fails_the_run_and_downstream_never_runs():
    def handle(fire):
        if fire.item == 1:
            raise NodeError("bad item")
        return fire.input

    driven = drive(graph(FAN), None, {"list": lambda f: {"items": [1, 2, 3]}, "handle": handle})

    assert driven.plan.failure["code"] == "GRAPH_NODE_FAILED"
    assert driven.plan.failure["step_key"] == "handle[1]"
    assert "total" not in driven.steps


def test_for_each__a_failing_item_fires_its_own_error_handler():
    nodes = {**FAN, "handle": {**FAN["handle"], "on_error": "alert"}, "alert": fn()}
    steps = [
        step("list", result={"items": [1, 2]}),
        step("handle[0]", "failed", error={"message": "no"}, data=1),
        step("handle[1]", "running"),
    ]

    result = plan(graph(nodes), None, steps)

    assert keys(result.fire) == ["handle[0]:onError"]
    assert result.fire[0].input == {"error": {"message": "no"}, "data": 1}
    assert result.fire[0].from_key == "handle[0]"


def test_for_each__a_list_longer_than_max_items_fails_the_run_before_any_item():
    result = plan(graph(FAN), None, [step("list", result={"items": [1, 2, 3]})], max_items=2)

    assert result.fire == ()
    assert result.failure["code"] == "INVALID_INPUT"
    assert result.failure["step_key"] == "handle"
    assert "for_each over 3 items" in result.failure["message"]
    assert "MAX_FAN_OUT" in result.failure["message"]


def test_for_each__the_node_s_max_items_overrides_the_default_both_ways():
    raised = {**FAN, "handle": {**FAN["handle"], "max_items": 3}}
    lowered = {**FAN, "handle": {**FAN["handle"], "max_items": 1}}
    listed = [step("list", result={"items": [1, 2, 3]})]

    assert keys(plan(graph(raised), None, listed, max_items=2).fire) == [
        "handle[0]",
        "handle[1]",
        "handle[2]",
    ]
    refused = plan(graph(lowered), None, listed).failure
    assert "its max_items allows at most 1" in refused["message"]


def test_for_each__the_default_cap_is_a_thousand_items():
    listed = [step("list", result={"items": list(range(1001))})]

    assert "at most 1000" in plan(graph(FAN), None, listed).failure["message"]
