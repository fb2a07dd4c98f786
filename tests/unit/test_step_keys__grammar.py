from __future__ import annotations

import pytest

from pikku_workflows.step_keys import (
    InstanceKey,
    handled_key,
    handler_key,
    instance_order,
    item_key,
    ordinal_key,
    parse_instance_key,
)


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("validate", InstanceKey("validate")),
        ("a#1", InstanceKey("a", 1)),
        ("a#12", InstanceKey("a", 12)),
        ("handle[0]", InstanceKey("handle", 0, 0)),
        ("handle[10]", InstanceKey("handle", 0, 10)),
        ("mail.send v2", InstanceKey("mail.send v2")),
    ],
)
def test_parse_instance_key__splits_node_visit_and_item(key, parsed):
    assert parse_instance_key(key) == parsed


@pytest.mark.parametrize("key", ["a:onError", "a#0", "a#01", "h[01]", "h[x]", "", "__suspend:x"])
def test_parse_instance_key__other_keys_are_none(key):
    assert parse_instance_key(key) is None


def test_keys__format_and_parse_agree():
    assert ordinal_key("a", 0) == "a"
    assert ordinal_key("a", 3) == "a#3"
    assert item_key("h", 2) == "h[2]"
    assert handler_key("h[2]") == "h[2]:onError"
    assert handled_key("h[2]:onError") == "h[2]"
    assert handled_key("a#1:onError") == "a#1"
    assert handled_key("a") is None
    assert handled_key("bad#x:onError") is None


def test_instance_order__by_node_visit_then_item_numerically():
    keys = ["h[10]", "b", "a#10", "h[2]", "a#2", "a", "a:onError", "h[2]:onError"]

    assert sorted(keys, key=instance_order) == [
        "a",
        "a:onError",
        "a#2",
        "a#10",
        "b",
        "h[2]",
        "h[2]:onError",
        "h[10]",
    ]
