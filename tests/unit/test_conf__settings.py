from __future__ import annotations

import math

import pytest
from django.test import override_settings

from pikku_workflows.conf import DEFAULTS, pikku_settings


@pytest.fixture(autouse=True)
def no_pikku_environment(monkeypatch):
    for name in DEFAULTS:
        monkeypatch.delenv(f"PIKKU_{name}", raising=False)


def test_settings__defaults_from_design():
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.DEFAULT_STEP_RETRIES == 5
        assert pikku_settings.STEP_LEASE_SECONDS == 60
        assert pikku_settings.RUN_LEASE_SECONDS == 30
        assert pikku_settings.INLINE_SLEEP_MAX_SECONDS == 5
        assert pikku_settings.RELAY_PENDING_AFTER_SECONDS == 30
        assert pikku_settings.STALLED_RUN_AFTER_SECONDS == 300
        assert pikku_settings.REDISPATCH_BACKOFF_SECONDS == 30
        assert pikku_settings.REDISPATCH_BACKOFF_MAX_SECONDS == 600
        assert pikku_settings.RECOVERY_BATCH == 100
        assert pikku_settings.MODULES == []
        assert pikku_settings.ORCHESTRATOR_QUEUE is None
        assert pikku_settings.RUN_QUERYSET_FILTER is None


def test_settings__override_settings_takes_effect_at_once():
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 7, "MODULES": ["shop.flows"]}):
        assert pikku_settings.STEP_LEASE_SECONDS == 7
        assert pikku_settings.MODULES == ["shop.flows"]
        assert pikku_settings.RUN_LEASE_SECONDS == 30
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 9}):
        assert pikku_settings.STEP_LEASE_SECONDS == 9


def test_settings__missing_or_none_dict_means_defaults():
    with override_settings(PIKKU_WORKFLOWS=None):
        assert pikku_settings.DEFAULT_STEP_RETRIES == 5
    with override_settings():
        from django.conf import settings

        del settings.PIKKU_WORKFLOWS
        assert pikku_settings.DEFAULT_STEP_RETRIES == 5


def test_settings__environment_read_when_not_in_dict(monkeypatch):
    monkeypatch.setenv("PIKKU_STEP_LEASE_SECONDS", "3")
    monkeypatch.setenv("PIKKU_TIMER_POLL_SECONDS", "0.05")
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.STEP_LEASE_SECONDS == 3
        assert isinstance(pikku_settings.STEP_LEASE_SECONDS, int)
        assert math.isclose(pikku_settings.TIMER_POLL_SECONDS, 0.05)


def test_settings__environment_is_read_on_access(monkeypatch):
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.STEP_LEASE_SECONDS == 60
        monkeypatch.setenv("PIKKU_STEP_LEASE_SECONDS", "4")
        assert pikku_settings.STEP_LEASE_SECONDS == 4


def test_settings__dict_wins_over_environment(monkeypatch):
    monkeypatch.setenv("PIKKU_STEP_LEASE_SECONDS", "3")
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": 11}):
        assert pikku_settings.STEP_LEASE_SECONDS == 11


def test_settings__environment_ignored_for_non_numeric_settings(monkeypatch):
    monkeypatch.setenv("PIKKU_ORCHESTRATOR_QUEUE", "elsewhere")
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.ORCHESTRATOR_QUEUE is None
        assert pikku_settings.RUN_QUERYSET_FILTER is None


def test_settings__unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="NOT_A_SETTING"):
        pikku_settings.NOT_A_SETTING  # noqa: B018
    assert not hasattr(pikku_settings, "STEP_LEASE")
    assert getattr(pikku_settings, "NOT_A_SETTING", "fallback") == "fallback"


def test_settings__unknown_name_raises_even_when_in_dict():
    with override_settings(PIKKU_WORKFLOWS={"TYPO_SECONDS": 1}), pytest.raises(AttributeError):
        pikku_settings.TYPO_SECONDS  # noqa: B018


def test_settings__fractional_environment_value_is_not_truncated(monkeypatch):
    monkeypatch.setenv("PIKKU_STEP_LEASE_SECONDS", "0.5")
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.STEP_LEASE_SECONDS == 0.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [("false", False), ("0", False), ("Off", False), ("true", True), ("1", True)],
)
def test_settings__a_true_false_setting_reads_words_from_the_environment(
    monkeypatch, text, expected
):
    monkeypatch.setenv("PIKKU_IN_PLACE", text)
    with override_settings(PIKKU_WORKFLOWS={}):
        assert pikku_settings.IN_PLACE is expected


@pytest.mark.parametrize(
    ("variable", "text"),
    [
        ("PIKKU_IN_PLACE", "maybe"),
        ("PIKKU_STEP_LEASE_SECONDS", "ten"),
        ("PIKKU_STEP_LEASE_SECONDS", "inf"),
    ],
)
def test_settings__an_unreadable_environment_value_gives_the_default(monkeypatch, variable, text):
    monkeypatch.setenv(variable, text)
    name = variable.removeprefix("PIKKU_")
    with override_settings(PIKKU_WORKFLOWS={}):
        assert getattr(pikku_settings, name) == DEFAULTS[name]
