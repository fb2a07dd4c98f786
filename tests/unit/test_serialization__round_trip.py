from __future__ import annotations

import datetime
import decimal
import json
import math
import uuid

import pytest
from django.test import override_settings

from pikku_workflows.serialization import (
    MAX_NESTING_DEPTH,
    NestedTooDeeply,
    NotStorableJson,
    loads_json,
    round_trip,
)


def test_round_trip__tuple_becomes_list():
    assert round_trip((1, 2, (3, 4))) == [1, 2, [3, 4]]
    assert round_trip({"pair": ("a", "b")}) == {"pair": ["a", "b"]}


def test_round_trip__returns_a_copy_not_the_value():
    value = {"items": [1, {"x": 2}]}
    result = round_trip(value)
    assert result == value
    assert result is not value
    assert result["items"] is not value["items"]


def test_round_trip__int_dict_keys_become_strings():
    assert round_trip({1: "one"}) == {"1": "one"}


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -7, 2**70, 1.25, "", "héllo ✓", [], {}, {"a": [None, {"b": "c"}]}],
)
def test_round_trip__json_values_unchanged(value):
    assert round_trip(value) == value


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_round_trip__non_finite_floats_rejected(number):
    with pytest.raises(NotStorableJson):
        round_trip(number)
    with pytest.raises(NotStorableJson):
        round_trip({"nested": [1, number]})


@pytest.mark.parametrize(
    "value",
    [
        "\u0000",
        "a\u0000b",
        ["ok", "bad\x00"],
        {"key": "value\u0000"},
        {"key\u0000": "value"},
        {"outer": {"in\u0000ner": 1}},
    ],
)
def test_round_trip__nul_character_rejected_in_strings_and_keys(value):
    with pytest.raises(NotStorableJson):
        round_trip(value)


@pytest.mark.parametrize("text", ["\\u0000", "C:\\u0000\\dir", "\\\\u0000"])
def test_round_trip__escaped_backslash_before_u0000_is_not_a_nul(text):
    # A literal backslash followed by "u0000" is six ordinary characters jsonb stores fine.
    assert round_trip(text) == text
    assert round_trip({text: text}) == {text: text}


def test_round_trip__nul_after_escaped_backslash_still_rejected():
    with pytest.raises(NotStorableJson):
        round_trip("\\\u0000")


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (decimal.Decimal("12.50"), "12.50"),
        (datetime.date(2024, 5, 1), "2024-05-01"),
        (datetime.datetime(2024, 5, 1, 10, 30, tzinfo=datetime.UTC), "2024-05-01T10:30:00Z"),
        (datetime.datetime(2024, 5, 1, 10, 30, 0, 123456), "2024-05-01T10:30:00.123"),
        (
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "12345678-1234-5678-1234-567812345678",
        ),
        (datetime.timedelta(minutes=5), "P0DT00H05M00S"),
    ],
)
def test_round_trip__values_django_models_hold_come_back_as_their_json_strings(value, stored):
    # DjangoJSONEncoder's spelling: what a model's field value reads back as after a replay.
    assert round_trip(value) == stored
    assert round_trip({"nested": [value]}) == {"nested": [stored]}
    assert round_trip(round_trip(value)) == stored


@pytest.mark.parametrize(
    "value",
    [
        object(),
        {uuid.uuid4()},
        b"bytes",
        {("tuple", "key"): 1},
        {decimal.Decimal("1.5"): "a key that is not a string"},
        lambda: None,
    ],
)
def test_round_trip__non_serialisable_rejected(value):
    with pytest.raises(NotStorableJson):
        round_trip(value)


def test_round_trip__circular_reference_rejected():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotStorableJson):
        round_trip(loop)


def test_round_trip__error_is_a_value_error_chained_to_its_cause():
    with pytest.raises(ValueError) as caught:
        round_trip(object())
    assert isinstance(caught.value, NotStorableJson)
    assert isinstance(caught.value.__cause__, TypeError)


@pytest.mark.parametrize(
    "value",
    ["\ud800", "ok \udfff", ["\udc00"], {"key": "\ud83d"}, {"\ud800": "value"}],
)
def test_round_trip__lone_surrogates_rejected_in_strings_and_keys(value):
    # jsonb refuses them ("Unicode low surrogate must follow a high surrogate").
    with pytest.raises(NotStorableJson, match="surrogate"):
        round_trip(value)


def test_round_trip__a_surrogate_pair_is_an_ordinary_character():
    assert round_trip("\ud83d\ude00") == "\U0001f600"


def test_round_trip__values_nested_too_deeply_are_rejected_not_a_recursion_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(NotStorableJson, match="nested"):
        round_trip(deep)


def _nested(levels: int) -> list:
    value: list = [1]
    for _ in range(levels - 1):
        value = [value]
    return value


def test_round_trip__nesting_is_capped_at_max_nesting_depth():
    assert MAX_NESTING_DEPTH == 256
    assert round_trip(_nested(256)) == _nested(256)
    assert round_trip({"a": _nested(255)}) == {"a": _nested(255)}
    with pytest.raises(NestedTooDeeply, match="nested deeper than 256 levels"):
        round_trip(_nested(257))
    with pytest.raises(NestedTooDeeply):
        round_trip({"wide": [1] * 1000, "deep": _nested(256)})


def test_loads_json__deep_text_is_nested_too_deeply_never_a_recursion_error():
    for levels in (257, 100_000):
        with pytest.raises(NestedTooDeeply):
            loads_json("[" * levels + "]" * levels)
    assert loads_json("[[1]]") == [[1]]


def test_round_trip__values_over_max_payload_bytes_are_rejected():
    with override_settings(PIKKU_WORKFLOWS={"MAX_PAYLOAD_BYTES": 100}):
        assert round_trip("x" * 90) == "x" * 90
        with pytest.raises(NotStorableJson, match="100 bytes"):
            round_trip({"text": "x" * 100})


def test_round_trip__the_default_limit_is_ten_megabytes():
    round_trip("é" * 4_000_000)  # 8 MB of UTF-8
    with pytest.raises(NotStorableJson, match="10000000 bytes"):
        round_trip("x" * 10_000_001)


def _through_json(value):
    return json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))


@pytest.mark.parametrize(
    "value",
    [
        {"i": 7},
        {"a": [1, 2.5, -0.0, 1e16, True, None, "line\nbreak\ttab"], "b": {"c": ""}},
        [2**53 - 1, -(2**53) + 1, 2**53, 2**70],  # the last two take the round trip
        {"text": "x" * 300},  # longer than the shortcut's strings
        list(range(100)),  # more parts than the shortcut's
        {"héllo": "✓"},  # not ASCII
        {"nested": {"deeper": [{"k": [[]]}]}},
    ],
)
def test_round_trip__a_plain_value_is_copied_as_json_would_give_it_back(value):
    result = round_trip(value)

    assert result == _through_json(value)
    assert repr(result) == repr(_through_json(value))  # -0.0, 1e16 and ints keep their type
    if isinstance(value, dict | list) and value:
        assert result is not value


def test_round_trip__a_plain_value_under_a_small_payload_limit_is_still_measured():
    small_limit = override_settings(PIKKU_WORKFLOWS={"MAX_PAYLOAD_BYTES": 10})
    with small_limit, pytest.raises(NotStorableJson, match="at most 10 bytes"):
        round_trip({"i": "0123456789"})


@pytest.mark.parametrize("value", [{"s": "nul\x00"}, {"f": math.nan}, {"f": math.inf}])
def test_round_trip__plain_looking_values_json_refuses_are_refused(value):
    with pytest.raises(NotStorableJson):
        round_trip(value)
