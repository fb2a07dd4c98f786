from __future__ import annotations

import copy
import json

import pytest

from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.graph import (
    definition_hash,
    load_definition_file,
    parse_definition,
    read_definition_file,
)
from pikku_workflows.graph.references import Reference
from pikku_workflows.retry import RetryPolicy

ONBOARDING = {
    "entry": ["validate"],
    "nodes": {
        "validate": {"function": "users.validate", "next": "route"},
        "route": {"function": "users.classify", "next": {"vip": "welcome_vip", "std": "welcome"}},
        "welcome_vip": {
            "function": "mail.vip",
            "input": {"user": {"$ref": "validate", "path": "user"}},
        },
        "welcome": {"function": "mail.std", "retries": 2, "retry_delay": "5s", "on_error": "page"},
        "page": {"function": "alerts.page"},
    },
}


def test_parse_definition__nodes_with_their_options():
    definition = parse_definition(ONBOARDING)

    assert definition.entry == ("validate",)
    assert list(definition.nodes) == sorted(ONBOARDING["nodes"])
    route = definition.node("route")
    assert route.branches == {"vip": ("welcome_vip",), "std": ("welcome",)}
    assert route.next == ("welcome_vip", "welcome")
    assert definition.node("validate").next == ("route",)
    assert definition.node("validate").branches is None
    welcome = definition.node("welcome")
    assert (welcome.retries, welcome.retry_delay, welcome.on_error) == (2, "5s", "page")
    assert welcome.retry_policy(5) == RetryPolicy(2, 5000)
    assert definition.node("page").retry_policy(5) == RetryPolicy(5, None)
    assert definition.node("welcome_vip").has_input
    assert definition.node("welcome_vip").depends_on == ("validate",)
    assert not definition.node("validate").has_input


def test_parse_definition__defaults():
    node = parse_definition({"entry": "a", "nodes": {"a": {"function": "f"}}}).node("a")

    assert (node.max_visits, node.mode, node.retries, node.retry_delay) == (
        10,
        "parallel",
        None,
        None,
    )
    assert (node.for_each, node.on_error, node.approval, node.next) == (None, None, None, ())


def test_parse_definition__for_each_and_dependencies():
    raw = {
        "entry": "src",
        "nodes": {
            "src": {"function": "f", "next": ["other", "each"]},
            "other": {"function": "f"},
            "each": {
                "function": "f",
                "for_each": {"$ref": "src", "path": "rows"},
                "mode": "sequential",
                "max_visits": 1,
                "input": {"$template": "{{ other.x }} {{ $item }} {{ trigger.id }}"},
            },
        },
    }

    node = parse_definition(raw).node("each")

    assert node.for_each == Reference("src", ("rows",))
    assert node.mode == "sequential"
    assert node.max_visits == 1
    assert node.depends_on == ("other", "src")


def test_parse_definition__an_approval_node_depends_on_its_data():
    raw = {
        "entry": "q",
        "nodes": {
            "q": {"function": "f", "next": "ok"},
            "ok": {
                "approval": {"policy": "all", "approvers": ["ann"], "data": {"t": {"$ref": "q"}}}
            },
        },
    }

    node = parse_definition(raw).node("ok")

    assert node.function is None
    assert node.approval == {"policy": "all", "approvers": ["ann"], "data": {"t": {"$ref": "q"}}}
    assert node.depends_on == ("q",)


def test_parse_definition__topology_marks_back_edges():
    raw = {
        "entry": "start",
        "nodes": {
            "start": {"function": "f", "next": "a"},
            "a": {"function": "f", "next": {"retry": "b", "done": "c"}},
            "b": {"function": "f", "next": "a"},
            "c": {"function": "f"},
        },
    }

    topology = parse_definition(raw).topology

    assert topology.is_back_edge("b", "a") and topology.is_back_edge("a", "b")
    assert not topology.is_back_edge("start", "a") and not topology.is_back_edge("a", "c")
    assert topology.forward_predecessors["a"] == ("start",)
    assert topology.forward_predecessors["c"] == ("a",)
    assert topology.on_cycle("a") and not topology.on_cycle("c")


def test_parse_definition__source_is_the_json_round_trip():
    raw = {"entry": ("a",), "nodes": {"a": {"function": "f", "input": (1, 2)}}}

    definition = parse_definition(raw)

    assert definition.source == {"entry": ["a"], "nodes": {"a": {"function": "f", "input": [1, 2]}}}
    assert definition.node("a").input == [1, 2]


def test_parse_definition__rejects_with_every_problem():
    with pytest.raises(InvalidInput) as caught:
        parse_definition({"entry": "a", "nodes": {"a": {"function": "f", "next": "x"}}})

    assert caught.value.problems == ["node 'a': next names unknown node 'x'"]


# --- hash --------------------------------------------------------------------------------


def test_definition_hash__same_definition_in_another_key_order():
    reordered = {
        "nodes": {
            key: dict(reversed(list(node.items())))
            for key, node in reversed(list(ONBOARDING["nodes"].items()))
        },
        "entry": ["validate"],
    }

    assert parse_definition(reordered).hash == parse_definition(ONBOARDING).hash
    assert json.dumps(reordered) != json.dumps(ONBOARDING)


def test_definition_hash__is_16_hex_digits_of_sha256():
    digest = parse_definition(ONBOARDING).hash

    assert len(digest) == 16 and int(digest, 16) >= 0
    assert digest == definition_hash(ONBOARDING)


def _changed(change):
    raw = copy.deepcopy(ONBOARDING)
    change(raw)
    return raw


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["nodes"]["welcome"].update(retries=3),
        lambda d: d["nodes"]["welcome"].update(function="mail.other"),
        lambda d: d["nodes"]["route"]["next"].update(vip=["welcome_vip", "welcome"]),
        lambda d: d["nodes"]["welcome_vip"]["input"]["user"].update(path="user.name"),
        lambda d: d["nodes"]["welcome"].update(max_visits=10),
        lambda d: d["nodes"]["validate"].update(next=["route"]),
        lambda d: d.update(entry="validate"),
        lambda d: d.update(description="the onboarding flow"),
    ],
)
def test_definition_hash__any_change_gives_another_hash(change):
    assert parse_definition(_changed(change)).hash != parse_definition(ONBOARDING).hash


# --- files -------------------------------------------------------------------------------


def test_load_definition_file__parses_the_file(tmp_path):
    path = tmp_path / "onboarding.json"
    path.write_text(json.dumps({"name": "onboarding", **ONBOARDING}))

    definition = load_definition_file(path)

    assert definition.hash == parse_definition(ONBOARDING).hash
    assert "name" not in definition.source


def test_read_definition_file__returns_the_name_apart(tmp_path):
    path = tmp_path / "flow.json"
    path.write_text(json.dumps({"name": "flow", **ONBOARDING}))

    assert read_definition_file(path) == ("flow", ONBOARDING)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "Cannot read the graph definition"),
        ("[1, 2]", "is not a JSON object"),
        ('{"name": 5, "entry": "a", "nodes": {}}', "has a name that is no string"),
    ],
)
def test_load_definition_file__unreadable_files_are_invalid_input(tmp_path, text, expected):
    path = tmp_path / "bad.json"
    path.write_text(text)

    with pytest.raises(InvalidInput, match=expected):
        load_definition_file(path)


def test_load_definition_file__missing_file_is_invalid_input(tmp_path):
    with pytest.raises(InvalidInput, match="Cannot read"):
        load_definition_file(tmp_path / "absent.json")


def test_load_definition_file__invalid_definition_names_the_workflow(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"entry": "a", "nodes": {"a": {}}}))

    with pytest.raises(InvalidInput, match="Graph workflow 'broken' is invalid"):
        load_definition_file(path)
