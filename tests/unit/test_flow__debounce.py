"""`pw.Debounce` is checked when it is declared, and the key it gives an input before anything is
written (pure: no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pikku_workflows as pw
from pikku_workflows.flow import run_debounce_key


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"quiet": 0}, "quiet must be longer than 0 ms"),
        ({"quiet": "0s"}, "quiet must be longer than 0 ms"),
        ({"quiet": -5}, "cannot be negative"),
        ({"quiet": "soon"}, "soon"),
        ({"quiet": "10s", "max_wait": "5s"}, r"max_wait \('5s'\) must be at least its quiet"),
        ({"quiet": "10s", "max_wait": "tomorrow"}, "tomorrow"),
        ({"key": ""}, "Debounce key must not be empty"),
        ({"key": 7}, "Debounce key must be a string"),
    ],
)
def test_debounce__bad_options_are_invalid_input_naming_the_problem(options, problem):
    with pytest.raises(pw.InvalidInput, match=problem):
        pw.Debounce(**{"key": "k", "quiet": "5s", **options})


def test_debounce__durations_are_ms_ints_strings_or_timedeltas():
    rule = pw.Debounce(key="k", quiet=500, max_wait=timedelta(minutes=1))
    assert (rule.quiet_ms, rule.max_wait_ms) == (500, 60_000)
    assert pw.Debounce(key="k", quiet="5s").max_wait_ms is None
    assert pw.Debounce(key="k", quiet="5s", max_wait="5s").max_wait_ms == 5_000


def test_workflow__a_debounce_that_is_not_a_rule_is_invalid_input_at_registration():
    with pytest.raises(pw.InvalidInput, match=r"debounce must be a pw\.Debounce"):
        pw.workflow("flow.wrong", debounce={"quiet": "5s"})


def test_run_debounce_key__a_string_key_is_every_start_s_and_a_function_reads_the_input():
    assert run_debounce_key(pw.Debounce(key="all", quiet="1s"), "w", {"t": 1}) == "all"
    keyed = pw.Debounce(key=lambda input: f"tenant:{input['t']}", quiet="1s")
    assert run_debounce_key(keyed, "w", {"t": 1}) == "tenant:1"
    with pytest.raises(pw.InvalidInput, match="at most 255 fit"):
        run_debounce_key(pw.Debounce(key=lambda input: "k" * 300, quiet="1s"), "w", {})
