from __future__ import annotations

import math

import pytest

from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.graph import definition_problems, parse_definition, structure_problems
from tests.graph_support import fn


def problems_of(nodes, entry="a", **top):
    return structure_problems({"entry": entry, "nodes": nodes, **top})


def only_problem(nodes, entry="a"):
    found = problems_of(nodes, entry)
    assert len(found) == 1, found
    return found[0]


# --- references to unknown nodes ---------------------------------------------------------


@pytest.mark.parametrize(
    ("next_", "where"),
    [("b", "next"), (["c", "b"], "next"), ({"yes": "c", "no": ["b"]}, "next['no']")],
)
def test_validation__unknown_node_in_next(next_, where):
    problem = only_problem({"a": fn(next_), **({"c": fn()} if next_ != "b" else {})})

    assert problem == f"node 'a': {where} names unknown node 'b'"


def test_validation__unknown_node_in_a_ref():
    problem = only_problem({"a": fn("b"), "b": fn(input={"x": [{"$ref": "ghost"}]})})

    assert problem == "node 'b': input.x[0]: $ref names unknown node 'ghost'"


def test_validation__unknown_node_in_a_template():
    problem = only_problem({"a": fn("b"), "b": fn(input={"$template": "Hi {{ ghost.name }}"})})

    assert (
        problem
        == "node 'b': input: template expression '{{ ghost.name }}' names unknown node 'ghost'"
    )


def test_validation__ambiguous_template_expression():
    nodes = {"a": fn(["a.b"]), "a.b": fn("c"), "c": fn(input={"$template": "{{ a.b.c }}"})}

    problem = only_problem(nodes)

    assert "ambiguous" in problem and "['a', 'a.b']" in problem


def test_validation__empty_template_expression():
    problem = only_problem({"a": fn(input={"$template": "x {{ }} y"})})

    assert "template expression '{{  }}' is not node.path" in problem


def test_validation__unknown_node_in_for_each():
    problem = only_problem({"a": fn(for_each={"$ref": "ghost"})})

    assert problem == "node 'a': for_each: $ref names unknown node 'ghost'"


def test_validation__for_each_must_be_a_ref():
    problem = only_problem({"a": fn(for_each=[1, 2])})

    assert "for_each must be a $ref to a list" in problem


def test_validation__for_each_ref_is_checked_like_an_input_ref():
    found = problems_of({"a": fn(for_each={"$ref": "$item", "path": "a..b", "default": []})})

    assert found == [
        "node 'a': for_each: a $ref takes only 'path' beside it, not ['default']",
        "node 'a': for_each: $item exists only in the input of a node with for_each",
        "node 'a': for_each: path must be dotted keys like 'user.name', not 'a..b'",
    ]


def test_validation__unknown_node_in_on_error():
    problem = only_problem({"a": fn(on_error="ghost")})

    assert problem == "node 'a': on_error names unknown node 'ghost'"


def test_validation__on_error_naming_the_node_itself():
    assert only_problem({"a": fn(on_error="a")}) == "node 'a': on_error names the node itself"


def test_validation__ref_extra_keys_and_bad_path():
    found = problems_of({"a": fn(input={"$ref": "trigger", "path": "a..b", "default": 1})})

    assert "node 'a': input: a $ref takes only 'path' beside it, not ['default']" in found
    assert "node 'a': input: path must be dotted keys like 'user.name', not 'a..b'" in found


def test_validation__item_outside_a_for_each_node():
    found = problems_of(
        {"a": fn(input={"x": {"$ref": "$item"}, "y": {"$template": "{{ $item }}"}})}
    )

    assert found == [
        "node 'a': input.x: $item exists only in the input of a node with for_each",
        "node 'a': input.y: $item exists only in the input of a node with for_each",
    ]


# --- step functions ----------------------------------------------------------------------

FUNCTIONS = {
    "entry": "a",
    "nodes": {"a": {"function": "known", "next": "b"}, "b": {"function": "missing"}},
}


def test_validation__unknown_step_function_with_a_collection():
    assert definition_problems(FUNCTIONS, {"known"}) == [
        "node 'b': unknown step function 'missing'"
    ]


def test_validation__unknown_step_function_with_a_predicate():
    assert definition_problems(FUNCTIONS, lambda name: name == "missing") == [
        "node 'a': unknown step function 'known'"
    ]


def test_validation__structure_only_leaves_step_functions_alone():
    assert structure_problems(FUNCTIONS) == []
    assert definition_problems(FUNCTIONS) == []


# --- fan-out options ---------------------------------------------------------------------


def test_validation__mode_without_for_each():
    assert only_problem({"a": fn(mode="parallel")}) == "node 'a': mode is set without for_each"


def test_validation__bad_mode():
    problem = only_problem({"a": fn(for_each={"$ref": "trigger"}, mode="eager")})

    assert problem == "node 'a': mode must be one of ['parallel', 'sequential'], not 'eager'"


def test_validation__for_each_on_a_cycle():
    nodes = {"a": fn("b"), "b": fn("a", for_each={"$ref": "a"})}

    problem = only_problem(nodes)

    assert problem == "node 'b' has for_each and lies on a cycle: a for_each node runs once"


# --- entry -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", [None, [], ""])
def test_validation__no_entry(entry):
    found = problems_of({"a": fn()}, entry=entry)

    assert found == ["no entry: set 'entry' to a node id or a list of node ids"]


def test_validation__unknown_entry():
    found = problems_of({"a": fn()}, entry=["a", "ghost"])

    assert found == ["entry names unknown node 'ghost'"]


def test_validation__entry_of_the_wrong_type():
    assert problems_of({"a": fn()}, entry={"a": 1}) == [
        "entry must be a node id or a list of node ids, not {'a': 1}"
    ]


def test_validation__entry_that_is_also_a_forward_target():
    problem = only_problem({"a": fn("b"), "b": fn()}, entry=["a", "b"])

    assert problem.startswith("entry node 'b' is also the next of ['a']")


def test_validation__entry_revisited_by_a_back_edge_is_fine():
    assert problems_of({"a": fn({"again": "b"}), "b": fn("a")}) == []


# --- reachability and joins --------------------------------------------------------------


def test_validation__unreachable_node():
    problem = only_problem({"a": fn(), "island": fn()})

    assert problem == "node 'island' is unreachable: no entry leads to it through next or on_error"


def test_validation__a_handler_is_reachable_through_on_error():
    assert problems_of({"a": fn(on_error="h"), "h": fn()}) == []


def test_validation__join_of_exclusive_branches_can_never_run():
    nodes = {
        "route": fn({"vip": "welcome_vip", "std": "welcome"}),
        "welcome_vip": fn("done"),
        "welcome": fn("done"),
        "done": fn(),
    }

    problem = only_problem(nodes, entry="route")

    assert problem == (
        "node 'done' can never run: it joins 'welcome' and 'welcome_vip', which need different "
        "branches of 'route' ('std' and 'vip')"
    )


def test_validation__join_of_a_branch_and_its_brancher_can_never_run():
    nodes = {"route": fn({"x": "join", "y": "other"}), "other": fn("join"), "join": fn()}

    problem = only_problem(nodes, entry="route")

    assert "node 'join' can never run" in problem and "('y' and 'x')" in problem


def test_validation__only_the_first_impossible_join_is_reported():
    nodes = {
        "route": fn({"x": "p", "y": "q"}),
        "p": fn("join"),
        "q": fn("join"),
        "join": fn("after"),
        "after": fn(),
    }

    found = problems_of(nodes, entry="route")

    assert len(found) == 1 and "'join'" in found[0]


@pytest.mark.parametrize(
    "nodes",
    [
        # a parallel fan-out joined again
        {"a": fn(["b", "c"]), "b": fn("d"), "c": fn("d"), "d": fn()},
        # both branches of one brancher lead into the same node by one edge each
        {"a": fn({"x": "d", "y": "d"}), "d": fn()},
        # a join inside one branch
        {
            "a": fn({"x": "b", "y": "z"}),
            "b": fn(["c", "e"]),
            "c": fn("d"),
            "e": fn("d"),
            "d": fn(),
            "z": fn(),
        },
        # a brancher on a cycle chooses anew on every visit
        {"a": fn({"retry": "b", "done": "c"}), "b": fn(["a", "d"]), "c": fn("d"), "d": fn()},
    ],
)
def test_validation__joins_that_can_fire_are_accepted(nodes):
    assert problems_of(nodes) == []


# --- references that can never be satisfied ----------------------------------------------


def test_validation__reading_a_node_that_only_runs_after():
    nodes = {"a": fn("b", input={"$ref": "b"}), "b": fn()}

    assert only_problem(nodes) == "node 'a' reads the result of 'b', which can only run after it"


def test_validation__reading_its_own_result():
    assert (
        only_problem({"a": fn(input={"$template": "{{ a }}"})}) == "node 'a' reads its own result"
    )


def test_validation__reading_a_parallel_branch_is_allowed():
    nodes = {"s": fn(["a", "b"]), "a": fn(), "b": fn(input={"$ref": "a"})}

    assert problems_of(nodes, entry="s") == []


# --- on_error handlers -------------------------------------------------------------------


def test_validation__an_on_error_handler_is_used_only_as_one():
    nodes = {
        "a": fn("h", on_error="h"),
        "h": fn("b", input={"x": 1}, on_error="x"),
        "b": fn(),
        "x": fn(),
    }

    found = problems_of(nodes)

    prefix = "node 'h' is the on_error handler of ['a'], so it cannot "
    assert found == [
        prefix + "be the next of ['a']",
        prefix + "have next (it is never followed)",
        prefix + "have input (it receives {'error', 'data'})",
        prefix + "have an on_error of its own",
    ]


def test_validation__an_on_error_handler_cannot_be_an_entry_nor_fan_out():
    nodes = {
        "a": fn(on_error="h"),
        "h": fn(for_each={"$ref": "trigger", "path": "items"}),
    }

    found = structure_problems({"entry": ["a", "h"], "nodes": nodes})

    prefix = "node 'h' is the on_error handler of ['a'], so it cannot "
    assert prefix + "be an entry" in found
    assert prefix + "have for_each" in found


def test_validation__a_branch_whose_targets_are_malformed():
    problem = only_problem({"a": fn({"ok": 3})})

    assert problem == (
        "node 'a': next['ok'] must be a node id, a list of node ids or {branch: ids}, not 3"
    )


def test_validation__approval_data_that_is_not_storable_json():
    problem = only_problem({"a": {"approval": {"data": {"total": math.nan}}}})

    assert problem.startswith("node 'a': approval.data is not storable JSON: ")


def test_validation__escalate_to_is_checked_like_approvers():
    approval = {"expires_in": "1d", "on_expire": "escalate", "escalate_to": ["group:"]}

    problem = only_problem({"a": {"approval": approval}})

    assert problem == "node 'a': approval: escalate_to: approver 'group:' names no group"


def test_validation__a_top_level_value_that_is_not_storable_json():
    raw = {"entry": "a", "nodes": {"a": fn()}, "description": "nul \x00 inside"}

    with pytest.raises(InvalidInput) as caught:
        parse_definition(raw)

    assert caught.value.problems[0].startswith("the definition is not storable JSON: ")


def test_validation__one_problem_without_a_name_reads_in_the_singular():
    with pytest.raises(InvalidInput) as caught:
        parse_definition({"entry": "a", "nodes": {"a": fn("ghost")}})

    assert str(caught.value) == (
        "The graph definition is invalid (1 problem):\n- node 'a': next names unknown node 'ghost'"
    )


# --- node ids and options ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_id", "expected"),
    [
        ("", "a node id must be a non-empty string, not ''"),
        ("  ", "a node id must be a non-empty string, not '  '"),
        ("a#1", "node id 'a#1' uses a reserved character (# : [ ])"),
        ("x:y", "node id 'x:y' uses a reserved character (# : [ ])"),
        ("h[0]", "node id 'h[0]' uses a reserved character (# : [ ])"),
        ("trigger", "node id 'trigger' is reserved for references"),
        ("$item", "node id '$item' is reserved for references"),
        ("n" * 201, "node id 'nnnnnnnnnnnnnnnnnnnn'... is over 200 characters"),
    ],
)
def test_validation__bad_node_ids(node_id, expected):
    found = problems_of({"a": fn(node_id), node_id: fn()})

    assert expected in found


def test_validation__a_node_needs_function_or_approval():
    assert only_problem({"a": {}}) == (
        "node 'a': needs 'function' (a step function name) or 'approval' (wf.approval options)"
    )


def test_validation__a_node_cannot_have_both():
    problem = only_problem({"a": {"function": "f", "approval": {}}})

    assert problem == "node 'a': has both 'function' and 'approval': a node is one or the other"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"function": 5}, "function must be a step function name, not 5"),
        ({"function": ""}, "function must be a step function name, not ''"),
        (
            {"function": "f", "next": 5},
            "next must be a node id, a list of node ids or {branch: ids}, not 5",
        ),
        (
            {"function": "f", "next": {"": "a"}},
            "next: a branch name must be a non-empty string, not ''",
        ),
        ({"function": "f", "retries": -1}, "retries must be an int from 0 to 1000, not -1"),
        ({"function": "f", "retries": 1001}, "retries must be an int from 0 to 1000, not 1001"),
        ({"function": "f", "retries": True}, "retries must be an int from 0 to 1000, not True"),
        ({"function": "f", "retries": "3"}, "retries must be an int from 0 to 1000, not '3'"),
        ({"function": "f", "max_visits": 0}, "max_visits must be an int from 1 to 1000, not 0"),
        ({"function": "f", "max_visits": 2.5}, "max_visits must be an int from 1 to 1000, not 2.5"),
        ({"function": "f", "max_items": 5}, "max_items is set without for_each"),
        (
            {"function": "f", "for_each": {"$ref": "trigger"}, "max_items": 0},
            "max_items must be an int from 1 to 1000000, not 0",
        ),
        ({"function": "f", "on_error": 5}, "on_error must name a node, not 5"),
        ({"function": "f", "description": 1}, "description must be a string, not 1"),
        ({"function": "f", "retires": 3}, "unknown options ['retires']"),
        ({"function": "f", "input": {"x": math.nan}}, "input is not storable JSON"),
        ({"function": "f", "input": {1, 2}}, "input is not storable JSON"),
        ({"function": "f", "input": "nul\x00"}, "input is not storable JSON"),
        ({"function": "f", "input": {"$template": 5}}, "input: a $template is"),
        (
            {"function": "f", "input": {"$ref": 5}},
            "input: $ref must name a node, 'trigger' or '$item', not 5",
        ),
    ],
)
def test_validation__bad_option_types(options, expected):
    problem = only_problem({"a": options})

    assert problem.startswith(f"node 'a': {expected}"), problem


@pytest.mark.parametrize("delay", ["soon", "10 s", -5, 1.5, True])
def test_validation__bad_retry_delay(delay):
    problem = only_problem({"a": fn(retry_delay=delay)})

    assert problem.startswith("node 'a': retry_delay: ") and problem.endswith("(or 'exponential')")


@pytest.mark.parametrize("delay", ["exponential", 250, "5s", "2h"])
def test_validation__good_retry_delay(delay):
    assert problems_of({"a": fn(retry_delay=delay)}) == []


@pytest.mark.parametrize(
    ("approval", "expected"),
    [
        ("yes", "approval must be an object of wf.approval options, not 'yes'"),
        ({"approvers": "group:x"}, "approval: approvers: a list of usernames"),
        ({"approvers": ["ann", ""]}, "approval: approvers: an approver must be a non-empty string"),
        (
            {"policy": "most"},
            "approval: policy must be one of ['any', 'all', 'quorum'], not 'most'",
        ),
        ({"policy": "quorum"}, "approval: policy 'quorum' needs quorum, a positive int, not None"),
        ({"policy": "quorum", "quorum": 0}, "approval: policy 'quorum' needs quorum, a positive"),
        ({"quorum": 2}, "approval: quorum is only meaningful with policy 'quorum'"),
        ({"policy": "all"}, "approval: policy 'all' needs approvers"),
        ({"exclude_requester": "yes"}, "approval: exclude_requester must be True or False"),
        ({"expires_in": "2 days"}, "approval: expires_in: Invalid duration '2 days'"),
        ({"remind_every": -1}, "approval: remind_every: A duration cannot be negative"),
        ({"expires_in": 0}, "approval: expires_in: must be longer than zero, not 0"),
        ({"remind_every": "0s"}, "approval: remind_every: must be longer than zero"),
        (
            {"on_expire": "ignore"},
            "approval: on_expire must be one of ['reject', 'approve', 'fail', 'escalate']",
        ),
        ({"on_expire": "fail"}, "approval: on_expire 'fail' needs expires_in"),
        (
            {"on_expire": "escalate", "expires_in": "1d"},
            "approval: on_expire 'escalate' needs escalate_to",
        ),
        ({"escalate_to": ["ann"]}, "approval: escalate_to is only meaningful with on_expire"),
        ({"form": "DecisionForm"}, "approval: form must be the dotted path of a Form class"),
        ({"summary": ["x"]}, "approval: summary must be text of at most 2000 characters"),
        ({"owner": "ann"}, "approval has unknown options ['owner']"),
        ({"data": {"$ref": "ghost"}}, "approval.data: $ref names unknown node 'ghost'"),
    ],
)
def test_validation__bad_approval_options(approval, expected):
    problem = only_problem({"a": {"approval": approval}})

    assert problem.startswith(f"node 'a': {expected}"), problem


def test_validation__full_approval_options_are_accepted():
    approval = {
        "approvers": ["ann", "group:managers", "perm:shop.approve"],
        "policy": "quorum",
        "quorum": 2,
        "exclude_requester": True,
        "expires_in": "2d",
        "on_expire": "escalate",
        "escalate_to": ["group:directors"],
        "remind_every": 3_600_000,
        "form": "shop.forms.Decision",
        "summary": "Approve the order",
        "data": {"total": {"$ref": "trigger", "path": "total"}},
    }

    assert problems_of({"a": {"approval": approval}}) == []


def test_validation__top_level_shape():
    assert structure_problems([1]) == [
        "a graph definition is an object with 'entry' and 'nodes', not [1]"
    ]
    assert structure_problems({"entry": "a", "nodes": {}}) == [
        "nodes must be a non-empty object of {node id: node options}",
        "entry names unknown node 'a'",
    ]
    assert problems_of({"a": fn()}, nodez={}, description=3) == [
        "unknown option 'nodez'",
        "description must be a string, not 3",
    ]
    assert only_problem({"a": "f"}) == "node 'a': a node is an object of options, not 'f'"


# --- everything at once ------------------------------------------------------------------


def test_validation__every_problem_is_listed_at_once():
    raw = {
        "entry": ["start", "nowhere"],
        "nodes": {
            "start": {"function": "f", "next": ["ghost", "work"]},
            "work": {"function": "f", "mode": "parallel", "retries": -2, "on_error": "nobody"},
            "island": {"function": "f"},
            "bad#id": {"approval": {"policy": "most"}},
        },
    }

    with pytest.raises(InvalidInput) as caught:
        parse_definition(raw, name="onboarding")

    expected = [
        "node id 'bad#id' uses a reserved character (# : [ ])",
        "entry names unknown node 'nowhere'",
        "node 'bad#id': approval: policy must be one of ['any', 'all', 'quorum'], not 'most'",
        "node 'start': next names unknown node 'ghost'",
        "node 'work': retries must be an int from 0 to 1000, not -2",
        "node 'work': on_error names unknown node 'nobody'",
        "node 'work': mode is set without for_each",
        "node 'bad#id' is unreachable: no entry leads to it through next or on_error",
        "node 'island' is unreachable: no entry leads to it through next or on_error",
    ]
    assert caught.value.problems == expected
    assert caught.value.code == "INVALID_INPUT"
    message = str(caught.value)
    assert message.startswith("Graph workflow 'onboarding' is invalid (9 problems):")
    assert all(f"- {problem}" in message for problem in expected)


def test_validation__full_validation_lists_structure_and_functions_together():
    raw = {"entry": "a", "nodes": {"a": {"function": "missing", "next": "ghost"}}}

    assert definition_problems(raw, set()) == [
        "node 'a': next names unknown node 'ghost'",
        "node 'a': unknown step function 'missing'",
    ]


def test_validation__more_nodes_than_the_cap_is_one_problem_found_before_anything_else():
    nodes = {f"n{i}": {"function": "f", "next": f"n{i + 1}"} for i in range(10)}
    nodes["n10"] = {"function": 5}

    assert structure_problems({"entry": "n0", "nodes": nodes}, max_nodes=10) == [
        "the graph has 11 nodes; at most 10 (GRAPH_MAX_NODES)"
    ]
    assert structure_problems({"entry": "n0", "nodes": nodes}, max_nodes=11) == [
        "node 'n10': function must be a step function name, not 5"
    ]


@pytest.mark.parametrize("where", ["input", "approval"])
def test_validation__a_definition_nested_ten_thousand_deep_is_one_problem_not_a_recursion_error(
    where,
):
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    node = {"function": "f", "input": deep} if where == "input" else {"approval": {"data": deep}}

    problems = structure_problems({"entry": "a", "nodes": {"a": node}})

    assert problems == [
        "the definition is not storable JSON: the value is nested deeper than 256 levels"
    ]


def test_validation__nesting_just_past_the_limit_is_refused_and_at_the_limit_accepted():
    def nested(depth: int) -> list:
        value: list = []
        for _ in range(depth - 1):
            value = [value]
        return value

    # The definition, "nodes" and the node are three levels above the input's.
    assert structure_problems({"entry": "a", "nodes": {"a": fn(input=nested(253))}}) == []
    assert structure_problems({"entry": "a", "nodes": {"a": fn(input=nested(254))}}) != []
