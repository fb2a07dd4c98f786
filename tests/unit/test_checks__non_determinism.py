"""E003: ON_NON_DETERMINISM must be "fail" or "suspend" (any other word fails runs; another type
is E005, and the default holds)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from pikku_workflows.checks import check_non_determinism_setting, check_settings
from pikku_workflows.engine.replay.versions import status_on_non_determinism
from pikku_workflows.status import RunStatus


@pytest.mark.parametrize(
    ("value", "status"), [("fail", RunStatus.FAILED), ("suspend", RunStatus.SUSPENDED)]
)
def test_on_non_determinism__a_known_value_passes_the_check(value, status):
    with override_settings(PIKKU_WORKFLOWS={"ON_NON_DETERMINISM": value}):
        assert check_non_determinism_setting() == []
        assert status_on_non_determinism() == status


@pytest.mark.parametrize("value", ["Suspend", "pause"])
def test_on_non_determinism__another_word_is_e003_and_fails_runs(value):
    with override_settings(PIKKU_WORKFLOWS={"ON_NON_DETERMINISM": value}):
        [error] = check_non_determinism_setting()
        assert error.id == "pikku_workflows.E003"
        assert status_on_non_determinism() == RunStatus.FAILED


@pytest.mark.parametrize("value", [None, ["suspend"]])
def test_on_non_determinism__not_a_string_is_e005_and_the_default_holds(value):
    with override_settings(PIKKU_WORKFLOWS={"ON_NON_DETERMINISM": value}):
        assert check_non_determinism_setting() == []
        assert [error.id for error in check_settings()] == ["pikku_workflows.E005"]
        assert status_on_non_determinism() == RunStatus.FAILED


def test_on_non_determinism__defaults_to_fail():
    assert check_non_determinism_setting() == []
    assert status_on_non_determinism() == RunStatus.FAILED
