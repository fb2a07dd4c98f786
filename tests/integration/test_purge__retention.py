"""Retention by configuration: the `RETENTION` setting and `@pw.workflow(retention=...)` make the
timer loop purge by itself, in short slices; `manage.py pikku_purge` is `pw.purge_runs` from a
shell, `--dry-run` printing the counts."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

import pikku_workflows as pw
from pikku_workflows.checks import check_retention_setting
from pikku_workflows.engine.operations.purge import purge_by_retention
from pikku_workflows.engine.operations.recovery import RetentionPurges
from pikku_workflows.models import WorkflowRun, WorkflowRunTombstone
from tests.retention import age, ended_order, register_shop

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def shop() -> None:
    register_shop()


def _failed_run() -> str:
    return pw.start_workflow("retention.broken", {}, inline=True)


def _roots() -> set[str]:
    return {
        str(pk) for pk in WorkflowRun.objects.filter(parent_run=None).values_list("pk", flat=True)
    }


@override_settings(PIKKU_WORKFLOWS={"RETENTION": {"completed": "30d", "failed": "90d"}})
def test_retention__the_setting_keeps_each_status_for_its_own_time():
    completed, failed_recently, failed_long_ago = ended_order(1), _failed_run(), _failed_run()
    age(completed, days=40)
    age(failed_recently, days=40)
    age(failed_long_ago, days=100)

    counts = purge_by_retention()

    assert counts is not None and counts["runs"] == 3
    assert _roots() == {failed_recently}


@override_settings(PIKKU_WORKFLOWS={"RETENTION": {"completed": "30d"}})
def test_retention__a_workflows_own_retention_wins_for_the_statuses_it_names():
    @pw.workflow("retention.audit_trail", retention={"completed": "365d"})
    def audit_trail(wf, input):
        return wf.do("pack", "retention.pack", input)

    order = ended_order(1)
    kept = pw.start_workflow("retention.audit_trail", {}, inline=True)
    for run_id in (order, kept):
        age(run_id, days=40)

    purge_by_retention()

    assert _roots() == {kept}


def test_retention__without_it_nothing_is_purged_by_itself():
    run_id = ended_order(1)
    age(run_id, days=4000)

    assert purge_by_retention() is None
    assert WorkflowRun.objects.filter(pk=run_id).exists()


@override_settings(PIKKU_WORKFLOWS={"RETENTION": {"completed": "1d"}, "PURGE_INTERVAL_SECONDS": 60})
def test_retention__the_timer_loop_purges_once_per_interval():
    now = [0.0]
    purges = RetentionPurges(clock=lambda: now[0])
    first, second = ended_order(1), ended_order(2)
    age(first, days=2)

    purges.purge_when_due()
    age(second, days=2)
    now[0] = 59.0
    purges.purge_when_due()
    assert _roots() == {second}

    now[0] = 60.0
    purges.purge_when_due()
    assert _roots() == set()


@pytest.mark.parametrize(
    "retention", [{"running": "1d"}, {"completed": "soon"}, {"completed": -1}, ["completed"]]
)
def test_retention__a_workflows_bad_retention_is_refused_when_it_registers(retention):
    with pytest.raises(pw.InvalidInput):
        pw.workflow("retention.bad", retention=retention)(lambda wf, input: None)


def test_retention__a_bad_setting_is_a_system_check_error():
    with override_settings(PIKKU_WORKFLOWS={"RETENTION": {"completed": "a month"}}):
        (error,) = check_retention_setting()
    assert error.id == "pikku_workflows.E007" and "a month" in error.msg
    with override_settings(PIKKU_WORKFLOWS={"RETENTION": {"completed": "30d"}}):
        assert check_retention_setting() == []


def test_pikku_purge__dry_run_prints_the_counts_and_deletes_nothing():
    run_id = ended_order(1)
    age(run_id, days=40)
    out = StringIO()

    call_command("pikku_purge", "--older-than", "30d", "--dry-run", stdout=out)

    assert "Would purge 2 runs in 1 batches." in out.getvalue()
    assert "workflowstephistory: 4" in out.getvalue()
    assert WorkflowRun.objects.count() == 2


def test_pikku_purge__takes_the_same_options_as_purge_runs():
    completed, failed = ended_order(1), _failed_run()
    for run_id in (completed, failed):
        age(run_id, days=40)
    out = StringIO()

    call_command(
        "pikku_purge", "--older-than", "30d", "--status", "failed", "--batch", "5", stdout=out
    )

    assert "Purged 1 runs in 1 batches." in out.getvalue()
    assert list(WorkflowRunTombstone.objects.values_list("workflow", flat=True)) == [
        "retention.broken"
    ]


@pytest.mark.parametrize(
    "arguments",
    [["--older-than", "abc"], ["--status", "running"], ["--workflow", "nope"], ["--batch", "0"]],
)
def test_pikku_purge__bad_options_are_a_command_error(arguments):
    run_id = ended_order(1)
    age(run_id, days=40)

    with pytest.raises(CommandError):
        call_command("pikku_purge", *arguments, stdout=StringIO())

    assert WorkflowRun.objects.count() == 2
