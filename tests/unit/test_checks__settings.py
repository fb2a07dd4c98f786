"""E004-E006: the settings are checked at startup (unknown PIKKU_WORKFLOWS keys with the closest
known name, values of the wrong type, unreadable PIKKU_* variables), for every key of
conf.DEFAULTS with no code per setting; until fixed, runs use the default (and an ERROR says so
once), so no configuration mistake fails a run."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from pikku_workflows import conf
from pikku_workflows.checks import check_settings
from pikku_workflows.conf import DEFAULTS, pikku_settings


@pytest.fixture(autouse=True)
def no_pikku_environment(monkeypatch):
    for name in DEFAULTS:
        monkeypatch.delenv(f"PIKKU_{name}", raising=False)
    monkeypatch.setattr(conf, "_reported", set())


def checked(configured=None) -> list[tuple[str, str]]:
    with override_settings(PIKKU_WORKFLOWS=configured or {}):
        return [(error.id, error.msg) for error in check_settings()]


def test_settings_check__the_defaults_and_good_values_are_clean():
    assert checked(dict(DEFAULTS)) == []
    assert (
        checked(
            {
                "STEP_LEASE_SECONDS": 0.5,
                "DEFAULT_STEP_RETRIES": 0,
                "MODULES": ("shop.flows",),
                "RUN_QUERYSET_FILTER": lambda request, runs: runs,
                "ORCHESTRATOR_QUEUE": "orchestrators",
                "ADMIN_BASE_URL": None,
            }
        )
        == []
    )


def test_settings_check__an_unknown_key_names_the_closest_setting():
    [(error_id, message)] = checked({"STEP_LEASE_SECOND": 120})
    assert error_id == "pikku_workflows.E004"
    assert message == (
        "PIKKU_WORKFLOWS has an unknown key 'STEP_LEASE_SECOND'; did you mean 'STEP_LEASE_SECONDS'?"
    )
    [(_, message)] = checked({"COLOUR": "blue"})
    assert "unknown key 'COLOUR'; it is not a pikku_workflows setting" in message


@pytest.mark.parametrize(
    ("name", "value", "takes"),
    [
        ("STEP_LEASE_SECONDS", "60", "an int or a float"),
        ("STEP_LEASE_SECONDS", float("inf"), "an int or a float (finite)"),
        ("DEFAULT_STEP_RETRIES", 2.5, "an int"),
        ("DEFAULT_STEP_RETRIES", True, "an int"),
        ("IN_PLACE", "false", "True or False"),
        ("MODULES", "shop.flows", "a list or a tuple"),
        ("ON_NON_DETERMINISM", None, "a string"),
        ("ADMIN_BASE_URL", 8000, "a string or None"),
        ("RUN_QUERYSET_FILTER", 3, "a string or a callable or None"),
    ],
)
def test_settings_check__a_value_of_the_wrong_type_is_e005(name, value, takes):
    [(error_id, message)] = checked({name: value})
    assert error_id == "pikku_workflows.E005"
    assert message.startswith(f"PIKKU_WORKFLOWS[{name!r}] is {value!r}")
    assert message.endswith(f"it takes {takes}.")


def test_settings_check__a_settings_value_that_is_not_a_dict_is_e005():
    with override_settings(PIKKU_WORKFLOWS=[("STEP_LEASE_SECONDS", 5)]):
        [error] = check_settings()
        assert (error.id, error.msg) == (
            "pikku_workflows.E005",
            "PIKKU_WORKFLOWS is list; it takes a dict.",
        )
        assert pikku_settings.STEP_LEASE_SECONDS == 60


@pytest.mark.parametrize(
    ("variable", "text", "says"),
    [
        ("PIKKU_STEP_LEASE_SECONDS", "ten", "PIKKU_STEP_LEASE_SECONDS must be a number, not 'ten'"),
        ("PIKKU_IN_PLACE", "maybe", "PIKKU_IN_PLACE must be true or false"),
        ("PIKKU_ORCHESTRATOR_QUEUE", "fast", "ORCHESTRATOR_QUEUE is not read from the environment"),
    ],
)
def test_settings_check__an_unreadable_variable_is_e006(monkeypatch, variable, text, says):
    monkeypatch.setenv(variable, text)
    [(error_id, message)] = checked()
    assert error_id == "pikku_workflows.E006"
    assert says in message
    # The dict wins over the environment: the variable is not read, so nothing to report.
    assert (
        checked({variable.removeprefix("PIKKU_"): DEFAULTS[variable.removeprefix("PIKKU_")]}) == []
    )


def test_settings_check__a_setting_added_to_defaults_is_checked_with_no_more_code(monkeypatch):
    monkeypatch.setitem(DEFAULTS, "MAX_WIDGETS", 100)
    monkeypatch.setitem(DEFAULTS, "WIDGET_HOST", None)
    monkeypatch.setenv("PIKKU_MAX_WIDGETS", "lots")

    assert sorted(checked({"MAX_WIDGET": 5, "WIDGET_HOST": ["any", "thing"]})) == [
        (
            "pikku_workflows.E004",
            "PIKKU_WORKFLOWS has an unknown key 'MAX_WIDGET'; did you mean 'MAX_WIDGETS'?",
        ),
        ("pikku_workflows.E006", "PIKKU_MAX_WIDGETS must be a number, not 'lots'."),
    ]
    [(error_id, message)] = checked({"MAX_WIDGETS": "100"})
    assert (error_id, message.endswith("it takes an int.")) == ("pikku_workflows.E005", True)


def test_settings__a_wrong_value_is_never_used_and_logged_once(monkeypatch, caplog):
    monkeypatch.setenv("PIKKU_RUN_LEASE_SECONDS", "thirty")
    caplog.set_level(logging.ERROR, logger="pikku_workflows.conf")
    with override_settings(PIKKU_WORKFLOWS={"STEP_LEASE_SECONDS": "60", "IN_PLACE": "no"}):
        for _ in range(3):
            assert pikku_settings.STEP_LEASE_SECONDS == 60
            assert pikku_settings.IN_PLACE is True
            assert pikku_settings.RUN_LEASE_SECONDS == 30
    assert [record.getMessage() for record in caplog.records] == [
        "pikku_workflows: PIKKU_WORKFLOWS['STEP_LEASE_SECONDS'] is '60' (str); it takes an int "
        "or a float; using the default, 60.",
        "pikku_workflows: PIKKU_WORKFLOWS['IN_PLACE'] is 'no' (str); it takes True or False; "
        "using the default, True.",
        "pikku_workflows: PIKKU_RUN_LEASE_SECONDS must be a number, not 'thirty'; using the "
        "default, 30.",
    ]
