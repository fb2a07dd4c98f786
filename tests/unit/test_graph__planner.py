from __future__ import annotations

import random

from pikku_workflows.graph import plan
from tests.graph_support import Branch, NodeError, drive, fn, graph, keys, step

TRIGGER = {"order": 7}


# --- linear -------------------------------------------------------------------------------


def test_plan__empty_snapshot_fires_the_entry_with_the_trigger():
    definition = graph({"a": fn("b"), "b": fn()})

    result = plan(definition, TRIGGER, [])

    assert keys(result.fire) == ["a"]
    assert result.fire[0].input == TRIGGER
    assert result.fire[0].from_key is None
    assert not result.completed and result.failure is None


def test_plan__every_entry_fires_at_the_start():
    definition = graph({"a": fn(), "b": fn(), "c": fn()}, entry=["c", "b", "a"])

    assert keys(plan(definition, None, []).fire) == ["a", "b", "c"]


def test_plan__linear_chain_passes_each_output_to_the_next():
    definition = graph({"a": fn("b"), "b": fn("c"), "c": fn()})

    driven = drive(definition, 1, {"a": lambda f: f.input + 1, "b": lambda f: f.input * 10})

    assert driven.order == ["a", "b", "c"]
    assert [f.input for f in driven.fired] == [1, 2, 20]
    assert [f.from_key for f in driven.fired] == [None, "a", "b"]
    assert driven.plan.completed
    assert driven.plan.output == {"c": 20}


def test_plan__a_recorded_node_is_not_fired_again():
    definition = graph({"a": fn("b"), "b": fn()})

    result = plan(definition, None, [step("a", result=1), step("b", "running", from_key="a")])

    assert result.fire == ()
    assert not result.completed
    assert result.in_flight == ("b",)


# --- branches ----------------------------------------------------------------------------


BRANCHING = {
    "route": fn({"vip": "welcome_vip", "std": ["welcome", "survey"]}),
    "welcome_vip": fn(),
    "welcome": fn(),
    "survey": fn(),
}


def test_plan__taken_branch_fires_only_its_targets():
    definition = graph(BRANCHING)

    result = plan(definition, None, [step("route", result="r", branch="std")])

    assert keys(result.fire) == ["survey", "welcome"]
    assert all(f.from_key == "route" and f.input == "r" for f in result.fire)


def test_plan__untaken_branch_never_runs_and_the_run_completes():
    definition = graph(BRANCHING)

    driven = drive(definition, None, {"route": lambda f: Branch("vip", "v")})

    assert driven.order == ["route", "welcome_vip"]
    assert driven.plan.completed
    assert driven.plan.output == {"welcome_vip": "v"}


def test_plan__no_branch_chosen_fires_nothing_and_ends_the_path_there():
    definition = graph(BRANCHING)

    result = plan(definition, None, [step("route", result="alone")])

    assert result.fire == ()
    assert result.completed
    assert result.output == {"route": "alone"}


def test_plan__a_branch_next_does_not_name_fails_the_run():
    definition = graph(BRANCHING)

    result = plan(definition, None, [step("route", branch="gold")])

    assert result.fire == ()
    assert result.failure["code"] == "INVALID_INPUT"
    assert result.failure["step_key"] == "route"
    assert "'gold'" in result.failure["message"] and "['std', 'vip']" in result.failure["message"]


def test_plan__branch_is_ignored_when_next_is_unconditional():
    definition = graph({"a": fn(["b", "c"]), "b": fn(), "c": fn()})

    result = plan(definition, None, [step("a", branch="whatever")])

    assert keys(result.fire) == ["b", "c"]


# --- fan-out and joins -------------------------------------------------------------------


DIAMOND = {"a": fn(["b", "c"]), "b": fn("d"), "c": fn("d"), "d": fn()}


def test_plan__fan_out_fires_every_target_in_one_plan():
    result = plan(graph(DIAMOND), None, [step("a", result=0)])

    assert keys(result.fire) == ["b", "c"]


def test_plan__join_waits_while_a_predecessor_runs():
    steps = [step("a"), step("b", result=1, from_key="a"), step("c", "running", from_key="a")]

    result = plan(graph(DIAMOND), None, steps)

    assert result.fire == ()
    assert not result.completed
    assert result.in_flight == ("c",)


def test_plan__join_fires_once_with_every_predecessor_output():
    steps = [step("a"), step("b", result=1, from_key="a"), step("c", result=2, from_key="a")]

    result = plan(graph(DIAMOND), None, steps)

    assert keys(result.fire) == ["d"]
    assert result.fire[0].input == {"b": 1, "c": 2}
    assert result.fire[0].from_key == "b"


def test_plan__join_is_recorded_once_and_never_fired_again():
    definition = graph(DIAMOND)

    driven = drive(definition, None)

    assert driven.order == ["a", "b", "c", "d"]
    assert driven.plan.completed
    assert driven.plan.output == {"d": {"b": None, "c": None}}


def test_plan__converging_edges_without_a_join_input_queue_the_target_once():
    # Reference test 42: a->c and b->c; c is queued once.
    definition = graph({"a": fn("c"), "b": fn("c"), "c": fn()}, entry=["a", "b"])

    first = plan(definition, None, [step("a"), step("b", "running")])
    second = plan(definition, None, [step("a"), step("b")])

    assert first.fire == () and not first.completed
    assert keys(second.fire) == ["c"]


# --- revisits ----------------------------------------------------------------------------


CYCLE = {
    "start": fn("a"),
    "a": fn({"retry": "b", "done": "c"}),
    "b": fn("a"),
    "c": fn(),
}


def test_plan__back_edge_revisits_with_numbered_keys():
    # Reference test 43: start, a, b, a#1 (from b), c (from a#1).
    visits = iter(["retry", "done"])
    driven = drive(graph(CYCLE), None, {"a": lambda f: Branch(next(visits), f.key)})

    assert driven.order == ["start", "a", "b", "a#1", "c"]
    assert [f.from_key for f in driven.fired] == [None, "start", "a", "b", "a#1"]
    assert driven.plan.completed
    assert driven.plan.output == {"c": "a#1"}


def test_plan__lineage_walks_back_from_the_last_node():
    visits = iter(["retry", "done"])
    driven = drive(graph(CYCLE), None, {"a": lambda f: Branch(next(visits))})

    lineage, key = [], "c"
    while key is not None:
        lineage.append(key)
        key = driven.steps[key].from_step_key
    assert lineage[::-1] == ["start", "a", "b", "a#1", "c"]


def test_plan__max_visits_counts_the_first_visit():
    nodes = {**CYCLE, "a": fn({"retry": "b", "done": "c"}, max_visits=3)}
    driven = drive(graph(nodes), None, {"a": lambda f: Branch("retry")})

    assert driven.order == ["start", "a", "b", "a#1", "b#1", "a#2", "b#2"]
    assert driven.plan.failure["code"] == "GRAPH_MAX_VISITS"
    assert driven.plan.failure["step_key"] == "b#2"
    assert "max_visits (3)" in driven.plan.failure["message"]
    assert driven.plan.fire == ()


def test_plan__default_max_visits_is_ten():
    driven = drive(graph(CYCLE), None, {"a": lambda f: Branch("retry")})

    visits_of_a = [key for key in driven.order if key.split("#")[0] == "a"]
    assert len(visits_of_a) == 10
    assert driven.plan.failure["code"] == "GRAPH_MAX_VISITS"


def test_plan__back_edge_fires_once_per_source_instance():
    steps = [
        step("start"),
        step("a", branch="retry", from_key="start"),
        step("b", from_key="a"),
        step("a#1", "running", from_key="b"),
    ]

    result = plan(graph(CYCLE), None, steps)

    assert result.fire == ()
    assert result.in_flight == ("a#1",)


def test_plan__a_reference_reads_the_latest_visit():
    nodes = {**CYCLE, "c": fn(input={"last": {"$ref": "a"}})}
    steps = [
        step("start"),
        step("a", result="first", branch="retry", from_key="start"),
        step("b", from_key="a"),
        step("a#1", result="second", branch="done", from_key="b"),
    ]

    result = plan(graph(nodes), None, steps)

    assert keys(result.fire) == ["c"]
    assert result.fire[0].input == {"last": "second"}


def test_plan__revisited_entry_receives_the_previous_output():
    definition = graph({"a": fn({"again": "b"}), "b": fn("a")})
    steps = [step("a", result=1, branch="again"), step("b", result=2, from_key="a")]

    result = plan(definition, "trigger", steps)

    assert keys(result.fire) == ["a#1"]
    assert result.fire[0].input == 2


def test_plan__a_forward_edge_from_a_revisited_node_fires_its_target_once():
    # Both visits of `a` fire the forward edge a->t; t is node-once.
    definition = graph({"a": fn(["b", "t"]), "b": fn({"again": "a"}), "t": fn()})
    steps = [
        step("a", result=1),
        step("b", branch="again", from_key="a"),
        step("a#1", result=2, from_key="b"),
        step("t", "running", from_key="a"),
    ]

    before = plan(definition, None, steps[:3])
    after = plan(definition, None, steps)

    assert keys(before.fire) == ["b#1", "t"]
    assert before.fire[1].input == 1
    assert keys(after.fire) == ["b#1"]


def test_plan__a_self_loop_revisits_the_node():
    definition = graph({"poll": fn({"again": "poll", "ready": "use"}), "use": fn()})
    answers = iter(["again", "again", "ready"])

    driven = drive(definition, None, {"poll": lambda f: Branch(next(answers), f.key)})

    assert driven.order == ["poll", "poll#1", "poll#2", "use"]
    assert [f.from_key for f in driven.fired] == [None, "poll", "poll#1", "poll#2"]
    assert driven.plan.output == {"use": "poll#2"}


# --- dependencies ------------------------------------------------------------------------


PARALLEL_REF = {
    "start": fn(["a", "b"]),
    "a": fn(),
    "b": fn(input={"from_a": {"$ref": "a", "path": "value"}}),
}


def test_plan__a_node_waits_for_the_result_it_references():
    steps = [step("start"), step("a", "running", from_key="start")]

    result = plan(graph(PARALLEL_REF), None, steps)

    assert result.fire == ()
    assert result.blocked == ("b",)
    assert not result.completed


def test_plan__a_blocked_node_fires_once_the_reference_succeeded():
    steps = [step("start"), step("a", result={"value": 5}, from_key="start")]

    result = plan(graph(PARALLEL_REF), None, steps)

    assert keys(result.fire) == ["b"]
    assert result.fire[0].input == {"from_a": 5}
    assert result.fire[0].from_key == "start"


def test_plan__a_node_reached_before_the_fan_out_it_reads_waits_for_it():
    # The walk reaches `x` before `fan` completes in it; `x` must still fire, once.
    nodes = {
        "start": fn(["x_pre", "f_pre"]),
        "x_pre": fn("x"),
        "f_pre": fn("fan"),
        "fan": fn(for_each={"$ref": "trigger"}),
        "x": fn(input={"$ref": "fan"}),
    }
    steps = [
        step("start"),
        step("x_pre", from_key="start"),
        step("f_pre", from_key="start"),
        step("fan[0]", result="r0", from_key="f_pre"),
    ]

    result = plan(graph(nodes, entry="start"), ["only"], steps)

    assert keys(result.fire) == ["x"]
    assert result.fire[0].input == ["r0"]
    assert result.blocked == ()


def test_plan__a_reference_that_will_never_run_fails_the_run():
    nodes = {
        "route": fn({"x": "a", "y": "b"}),
        "a": fn(),
        "b": fn(input={"$ref": "a"}),
    }

    result = plan(graph(nodes), None, [step("route", branch="y")])

    assert result.failure["code"] == "INVALID_INPUT"
    assert result.failure["step_key"] == "b"
    assert "['a']" in result.failure["message"]


# --- in flight, retries, failure ---------------------------------------------------------


def test_plan__pending_scheduled_running_and_waiting_are_in_flight():
    definition = graph({"a": fn(["b", "c", "d", "e"]), "b": fn(), "c": fn(), "d": fn(), "e": fn()})
    statuses = {"b": "pending", "c": "scheduled", "d": "running", "e": "waiting"}
    steps = [step("a")] + [step(k, s, from_key="a") for k, s in statuses.items()]

    result = plan(definition, None, steps)

    assert result.fire == () and not result.completed and result.failure is None
    assert result.in_flight == ("b", "c", "d", "e")


def test_plan__a_row_no_node_made_still_counts_as_in_flight():
    definition = graph({"a": fn()})

    result = plan(definition, None, [step("a"), step("__suspend:maintenance", "pending")])

    assert not result.completed
    assert result.in_flight == ("__suspend:maintenance",)


def test_plan__failed_with_attempts_left_is_in_flight_not_a_failure():
    definition = graph({"a": fn("b", retries=2), "b": fn()})

    result = plan(definition, None, [step("a", "failed", attempt=2, limit=3)])

    assert result.failure is None
    assert not result.completed
    assert result.in_flight == ("a",)


def test_plan__exhausted_node_fails_the_run():
    definition = graph({"a": fn("b"), "b": fn()})
    error = {"code": "STEP_FAILED", "message": "card declined"}

    result = plan(definition, None, [step("a", "failed", attempt=3, limit=3, error=error)])

    assert result.fire == ()
    assert result.failure == {
        "code": "GRAPH_NODE_FAILED",
        "message": "Graph node 'a' failed after exhausting its attempts: card declined",
        "step_key": "a",
    }


def test_plan__a_failed_node_stops_new_work_elsewhere():
    definition = graph({"a": fn(["b", "c"]), "b": fn(), "c": fn("d"), "d": fn()})
    steps = [step("a"), step("b", "failed", from_key="a"), step("c", from_key="a")]

    result = plan(definition, None, steps)

    assert result.fire == ()
    assert result.failure["step_key"] == "b"


ON_ERROR = {
    "charge": fn("ship", on_error="refund"),
    "ship": fn(),
    "refund": fn(retries=0),
}
DECLINED = {"code": "STEP_FAILED", "message": "card declined"}


def test_plan__on_error_handler_fires_once_with_the_error_and_the_input():
    steps = [step("charge", "failed", error=DECLINED, data={"amount": 5})]

    result = plan(graph(ON_ERROR), None, steps)

    assert keys(result.fire) == ["charge:onError"]
    handler = result.fire[0]
    assert handler.node == "refund"
    assert handler.input == {"error": DECLINED, "data": {"amount": 5}}
    assert handler.from_key == "charge"
    assert result.failure is None


def test_plan__the_run_fails_only_once_the_handler_settled():
    failed = step("charge", "failed", error=DECLINED)

    running = plan(graph(ON_ERROR), None, [failed, step("charge:onError", "running")])
    retrying = plan(graph(ON_ERROR), None, [failed, step("charge:onError", "failed", limit=2)])
    done = plan(graph(ON_ERROR), None, [failed, step("charge:onError")])
    handler_failed = plan(graph(ON_ERROR), None, [failed, step("charge:onError", "failed")])

    assert running.fire == () and running.failure is None
    assert retrying.fire == () and retrying.failure is None
    assert done.failure["code"] == "GRAPH_NODE_FAILED"
    assert done.failure["step_key"] == "charge"
    assert handler_failed.failure["step_key"] == "charge"


def test_plan__driven_failure_runs_the_handler_then_fails():
    def decline(fire):
        raise NodeError("card declined")

    driven = drive(graph(ON_ERROR), {"amount": 5}, {"charge": decline})

    assert driven.order == ["charge", "charge:onError"]
    assert driven.fired[1].input["data"] == {"amount": 5}
    assert driven.plan.failure["code"] == "GRAPH_NODE_FAILED"
    assert "ship" not in driven.steps


def test_plan__a_node_without_on_error_fails_at_once():
    definition = graph({"a": fn(["b", "c"]), "b": fn(), "c": fn()})
    steps = [step("a"), step("b", "failed", from_key="a"), step("c", "running", from_key="a")]

    result = plan(definition, None, steps)

    assert result.failure["code"] == "GRAPH_NODE_FAILED"


# --- approvals, completion, determinism --------------------------------------------------


def test_plan__approval_node_fires_with_its_options_and_data_resolved():
    definition = graph(
        {
            "quote": fn("ok"),
            "ok": {
                "approval": {
                    "approvers": ["group:managers"],
                    "data": {"total": {"$ref": "quote", "path": "total"}},
                },
                "next": "ship",
            },
            "ship": fn(),
        }
    )

    result = plan(definition, None, [step("quote", result={"total": 40})])

    assert keys(result.fire) == ["ok"]
    assert result.fire[0].approval == {"approvers": ["group:managers"], "data": {"total": 40}}
    assert result.fire[0].input == {"total": 40}


def test_plan__a_waiting_approval_keeps_the_run_open():
    definition = graph({"ok": {"approval": {}, "next": "ship"}, "ship": fn()})

    result = plan(definition, None, [step("ok", "waiting")])

    assert not result.completed and result.fire == ()


def test_plan__output_holds_every_path_end():
    definition = graph({"a": fn(["b", "c"]), "b": fn(), "c": fn({"x": "d"}), "d": fn()})

    driven = drive(definition, "t", {"b": lambda f: "B", "c": lambda f: "C"})

    assert driven.plan.completed
    assert driven.plan.output == {"b": "B", "c": "C"}


def test_plan__same_snapshot_in_any_order_gives_the_same_plan():
    definition = graph(
        {
            "a": fn(["b", "c", "d"]),
            "b": fn("e"),
            "c": fn("e"),
            "d": fn({"l": "f", "r": "g"}),
            "e": fn(),
            "f": fn(),
            "g": fn(),
        }
    )
    steps = [
        step("a", result=1),
        step("b", result=2, from_key="a"),
        step("c", result=3, from_key="a"),
        step("d", result=4, branch="r", from_key="a"),
    ]
    expected = plan(definition, None, steps)

    shuffled = list(steps)
    for seed in range(5):
        random.Random(seed).shuffle(shuffled)
        assert plan(definition, None, shuffled) == expected
    assert keys(expected.fire) == ["e", "g"]


def test_plan__plans_do_not_depend_on_the_order_nodes_are_written():
    # Stored definitions come back from jsonb with their keys reordered.
    nodes = {"z": fn(["m", "a"]), "m": fn(), "a": fn()}
    reordered = {"a": fn(), "m": fn(), "z": fn(["m", "a"])}

    first = plan(graph(nodes, entry="z"), None, [step("z")])
    second = plan(graph(reordered, entry="z"), None, [step("z")])

    assert first == second
    assert keys(first.fire) == ["a", "m"]
