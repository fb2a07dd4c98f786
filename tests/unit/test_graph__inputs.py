from __future__ import annotations

import pytest

from pikku_workflows.graph import GraphNode, Scope, resolve, resolve_node_input

SCOPE = Scope(
    trigger={"id": 42, "tags": ["a", "b"]},
    results={
        "validate": {"user": {"name": "Ann", "vip": True, "orders": [{"total": 5}]}},
        "count": 3,
        "nothing": None,
        "text": "plain",
        "v2.check": {"ok": True},
    },
    node_ids=["validate", "count", "nothing", "text", "v2.check", "later"],
)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ({"$ref": "trigger"}, {"id": 42, "tags": ["a", "b"]}),
        ({"$ref": "trigger", "path": "id"}, 42),
        ({"$ref": "trigger", "path": "tags.1"}, "b"),
        ({"$ref": "validate", "path": "user.name"}, "Ann"),
        ({"$ref": "validate", "path": "user.orders.0.total"}, 5),
        ({"$ref": "count"}, 3),
        ({"$ref": "v2.check", "path": "ok"}, True),
    ],
)
def test_resolve__ref_with_a_path_reads_into_the_value(ref, expected):
    assert resolve(ref, SCOPE) == expected


@pytest.mark.parametrize(
    "ref",
    [
        {"$ref": "validate", "path": "user.email"},
        {"$ref": "validate", "path": "user.orders.3"},
        {"$ref": "validate", "path": "user.orders.-1"},
        {"$ref": "count", "path": "deeper"},
        {"$ref": "later"},
        {"$ref": "$item"},
    ],
)
def test_resolve__a_path_that_leads_nowhere_gives_none(ref):
    assert resolve(ref, SCOPE) is None


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("Order {{ trigger.id }} for {{ validate.user.name }}", "Order 42 for Ann"),
        ("{{trigger.id}}{{trigger.id}}", "4242"),
        ("vip={{ validate.user.vip }} n={{ count }}", "vip=true n=3"),
        ("tags: {{ trigger.tags }}", 'tags: ["a", "b"]'),
        ("user: {{ validate.user.orders.0 }}", 'user: {"total": 5}'),
        ("[{{ validate.user.email }}][{{ nothing }}][{{ later.x }}]", "[][][]"),
        ("{{ text }}", "plain"),
        ("{{ v2.check.ok }}", "true"),
        ("no expressions", "no expressions"),
    ],
)
def test_resolve__template_renders_a_string(template, expected):
    assert resolve({"$template": template}, SCOPE) == expected


def test_resolve__walks_nested_dicts_and_lists():
    value = {
        "user": {"$ref": "validate", "path": "user.name"},
        "lines": [{"$template": "#{{ trigger.id }}"}, 1, None, {"n": {"$ref": "count"}}],
        "static": {"keep": [True, "x"]},
    }

    assert resolve(value, SCOPE) == {
        "user": "Ann",
        "lines": ["#42", 1, None, {"n": 3}],
        "static": {"keep": [True, "x"]},
    }


def test_resolve__item_is_bound_for_a_for_each_instance():
    scope = Scope(trigger=None, item={"sku": "P1"}, has_item=True)

    assert resolve({"$ref": "$item", "path": "sku"}, scope) == "P1"
    assert resolve({"$template": "item {{ $item.sku }}"}, scope) == "item P1"
    assert resolve({"$ref": "$item"}, scope) == {"sku": "P1"}


def test_resolve_node_input__without_input_gives_the_default():
    node = GraphNode(id="n", function="f")

    assert resolve_node_input(node, SCOPE, {"from": "predecessor"}) == {"from": "predecessor"}


def test_resolve_node_input__an_explicit_null_input_is_an_input():
    node = GraphNode(id="n", function="f", input=None, has_input=True)

    assert resolve_node_input(node, SCOPE, "default") is None


def test_resolve_node_input__resolves_the_given_input():
    node = GraphNode(
        id="n", function="f", input={"id": {"$ref": "trigger", "path": "id"}}, has_input=True
    )

    assert resolve_node_input(node, SCOPE, "default") == {"id": 42}
