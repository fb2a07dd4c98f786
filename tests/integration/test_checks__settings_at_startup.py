"""A configuration mistake stops `check`, `migrate` and `pikku_worker` as they start (the system
check's E004-E006), and never fails a run: until it is fixed, runs use the defaults."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows import conf
from pikku_workflows.status import RunStatus

pytestmark = pytest.mark.django_db

MISTAKES = {"STEP_LEASE_SECOND": 120, "DEFAULT_STEP_RETRIES": "5"}


@pytest.mark.parametrize("command", ["check", "migrate", "pikku_worker"])
def test_startup__a_settings_mistake_stops_the_command(command, capsys):
    with override_settings(PIKKU_WORKFLOWS=MISTAKES), pytest.raises(SystemCheckError) as refused:
        # `check` always checks; call_command skips the others' checks unless told not to.
        call_command(command, verbosity=0, **({} if command == "check" else {"skip_checks": False}))
    assert "pikku_workflows.E004" in str(refused.value)
    assert "did you mean 'STEP_LEASE_SECONDS'?" in str(refused.value)
    assert "pikku_workflows.E005" in str(refused.value)
    assert "pikku_worker: cluster" not in capsys.readouterr().out  # it never started


def test_startup__a_settings_mistake_never_fails_a_run(monkeypatch):
    monkeypatch.setattr(conf, "_reported", set())
    monkeypatch.setenv("PIKKU_STEP_LEASE_SECONDS", "a minute")
    attempts = []

    @pw.step_function("settings_mistake.flaky")
    def flaky(data, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("blip")
        return "ok"

    @pw.workflow("settings_mistake.order")
    def order(wf, input):
        return wf.do("call", "settings_mistake.flaky", retry_delay=0)

    wrong = {"DEFAULT_STEP_RETRIES": "5", "INLINE_SLEEP_MAX_SECONDS": "5", "IN_PLACE": "yes"}
    with override_settings(PIKKU_WORKFLOWS=wrong):
        assert pw.run_to_completion("settings_mistake.order", {}, timeout="30s") == "ok"
        run = pw.get_run_status(pw.start_workflow("settings_mistake.order", {}, inline=True))
    assert run["status"] == RunStatus.COMPLETED
    assert attempts == [1, 2, 3, 1, 2, 3]


def test_startup__migrate_warns_of_nothing_of_ours_on_any_database():
    # The checks `migrate` runs (with the database: what `make demo` shows a new user on SQLite).
    messages = [
        message
        for message in checks.run_checks(databases=["default"])
        if not message.is_silenced() and "pikku_workflows" in f"{message.id} {message.obj}"
    ]

    assert messages == []
