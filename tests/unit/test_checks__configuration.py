from __future__ import annotations

import sys

import pytest
from django.test import override_settings

from pikku_workflows.checks import (
    check_database,
    check_payload_limits,
    check_queue_configuration,
)

RECOMMENDED = {
    "name": "pikku",
    "orm": "default",
    "timeout": 300,
    "retry": 600,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": -1,
}


def ids(messages) -> set[str]:
    return {message.id for message in messages}


def test_queue_checks__recommended_configuration_is_clean():
    with override_settings(Q_CLUSTER=RECOMMENDED):
        assert check_queue_configuration() == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"retry": 300}, "pikku_workflows.W001"),
        ({"retry": 100}, "pikku_workflows.W001"),
        ({"max_attempts": 0}, "pikku_workflows.W002"),
        ({"max_attempts": 3}, "pikku_workflows.W002"),
        ({"save_limit": 250}, "pikku_workflows.W003"),
    ],
)
def test_queue_checks__risky_settings_warn(change, expected):
    with override_settings(Q_CLUSTER={**RECOMMENDED, **change}):
        assert ids(check_queue_configuration()) == {expected}


def test_database_checks__conn_max_age_zero_warns(monkeypatch):
    from django.db import connections

    if connections["default"].vendor == "sqlite":
        pytest.skip("SQLite keeps no connection open: CONN_MAX_AGE does not apply")
    settings_dict = connections["default"].settings_dict
    monkeypatch.setitem(settings_dict, "CONN_MAX_AGE", 0)
    assert "pikku_workflows.W005" in ids(check_database())
    monkeypatch.setitem(settings_dict, "CONN_MAX_AGE", 60)
    assert "pikku_workflows.W005" not in ids(check_database())


@pytest.mark.parametrize(
    ("command", "warns"),
    [
        ("check", True),
        ("migrate", True),
        ("pikku_worker", True),
        ("pikku", False),
        ("runserver", False),
        ("shell", False),
    ],
)
def test_database_checks__sqlite_warns_single_machine_only_where_a_deploy_starts(
    monkeypatch, command, warns
):
    from django.db import connections

    monkeypatch.setattr(sys, "argv", ["manage.py", command])
    if connections["default"].vendor != "sqlite":
        assert "pikku_workflows.W004" not in ids(check_database())
        return
    # Nothing else either: SQLite keeps no connection, so CONN_MAX_AGE says nothing of it.
    assert ids(check_database()) == ({"pikku_workflows.W004"} if warns else set())


@pytest.mark.parametrize(
    ("django_limit", "pikku_limit", "warns"),
    [
        (2_621_440, 10_000_000, True),  # Django's default below pikku's
        (10_000_000, 10_000_000, False),
        (None, 10_000_000, False),  # Django sets no limit
        (2_621_440, 2_000_000, False),
    ],
)
def test_payload_checks__djangos_limit_below_max_payload_bytes_warns(
    django_limit, pikku_limit, warns
):
    with override_settings(
        DATA_UPLOAD_MAX_MEMORY_SIZE=django_limit,
        PIKKU_WORKFLOWS={"MAX_PAYLOAD_BYTES": pikku_limit},
    ):
        messages = check_payload_limits()

    assert ids(messages) == ({"pikku_workflows.W008"} if warns else set())
    if warns:
        assert f"({django_limit} bytes)" in messages[0].msg
        assert f"({pikku_limit} bytes)" in messages[0].msg
