"""`pw.Concurrency` is checked when it is declared, and the key it gives an input before a run is
written (pure: no database)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.flow import run_concurrency_key, run_priority


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_active": 0}, "max_active must be a whole number from 1"),
        ({"max_active": -1}, "max_active must be a whole number from 1"),
        ({"max_active": True}, "max_active must be a whole number from 1"),
        ({"max_active": 2.5}, "max_active must be a whole number from 1"),
        ({"on_full": "drop"}, "on_full must be one of queue, skip, replace"),
        ({"key": ""}, "Concurrency key must not be empty"),
        ({"key": 7}, "Concurrency key must be a string"),
    ],
)
def test_concurrency__bad_options_are_invalid_input_naming_the_problem(options, problem):
    with pytest.raises(pw.InvalidInput, match=problem):
        pw.Concurrency(**{"key": "k", **options})


def test_workflow__a_concurrency_that_is_not_a_rule_is_invalid_input_at_registration():
    with pytest.raises(pw.InvalidInput, match=r"concurrency must be a pw\.Concurrency"):
        pw.workflow("flow.wrong", concurrency={"max_active": 1})


def test_run_concurrency_key__a_string_key_is_every_run_s_and_a_function_reads_the_input():
    assert run_concurrency_key(pw.Concurrency(key="all"), "w", {"t": 1}) == "all"
    keyed = pw.Concurrency(key=lambda input: f"tenant:{input['t']}")
    assert run_concurrency_key(keyed, "w", {"t": 1}) == "tenant:1"


def test_run_concurrency_key__a_key_longer_than_its_column_is_refused():
    long_key = pw.Concurrency(key=lambda input: "k" * 300)
    with pytest.raises(pw.InvalidInput, match="at most 255 fit"):
        run_concurrency_key(long_key, "w", {})


@pytest.mark.parametrize("priority", [3601, -3601, 1.5, True, "60"])
def test_workflow__a_priority_out_of_range_or_not_whole_seconds_is_invalid_input(priority):
    with pytest.raises(pw.InvalidInput, match="priority must be whole seconds from -3600"):
        pw.workflow("flow.priority", priority=priority)


def test_run_priority__a_function_is_read_per_input_and_checked():
    def by_plan(input):
        return 60 if input["plan"] == "pro" else input["plan"]

    assert run_priority(by_plan, "w", {"plan": "pro"}) == 60
    with pytest.raises(pw.InvalidInput, match="must be whole seconds"):
        run_priority(by_plan, "w", {"plan": "free"})
    with pytest.raises(pw.InvalidInput, match="raised KeyError"):
        run_priority(by_plan, "w", {})
