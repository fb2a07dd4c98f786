"""`manage.py pikku_replay_check`: replays stored histories against the current code without
running any step or writing anything, lists the runs that would hit NON_DETERMINISTIC and exits
1 if there are any; `--workflow`, `--status`, `--since` and `--limit` narrow what it checks, and
runs an earlier deploy already stopped with NON_DETERMINISTIC are skipped."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.registry import registry
from tests.queue import drain_queue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def ran() -> list[str]:
    seen: list[str] = []
    for name in ("charge_v1", "charge_v2", "ship", "audit"):

        def step(data, ctx, name=name):
            seen.append(name)
            return {"by": name}

        step.__qualname__ = f"check_{name}"
        pw.step_function(f"check.{name}")(step)
    return seen


def deploy(name: str, body) -> None:
    registry.workflows.pop(name, None)
    pw.workflow(name)(body)


def v1(wf, input):
    charged = wf.do("charge", "check.charge_v1")
    wf.sleep("cool-off", "1h")
    return wf.do("ship", "check.ship", charged)


def compatible(wf, input):
    # Same recorded steps, new ones after them, and a new branch behind a patch.
    charged = wf.do("charge", "check.charge_v1")
    if wf.patched("audit"):
        wf.do("audit", "check.audit")
    wf.sleep("cool-off", "1h")
    return wf.do("ship", "check.ship", charged)


def breaking(wf, input):
    charged = wf.do("charge", "check.charge_v2")
    wf.sleep("cool-off", "1h")
    return wf.do("ship", "check.ship", charged)


def replay_check(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("pikku_replay_check", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), exc
    return out.getvalue(), None


def snapshot() -> tuple:
    """Everything a check could write."""
    return (
        sorted(WorkflowRun.objects.values_list("pk", "status", "updated_at", "state")),
        sorted(WorkflowStep.objects.values_list("pk", "status", "updated_at", "attempt")),
        WorkflowStepHistory.objects.count(),
    )


@pytest.fixture
def parked_runs(ran) -> list[str]:
    """Two runs of `check.order` on v1, each recorded `charge` and sleeps on `cool-off`."""
    deploy("check.order", v1)
    run_ids = [pw.start_workflow("check.order", {"n": n}) for n in range(2)]
    drain_queue()
    assert ran == ["charge_v1", "charge_v1"]
    ran.clear()
    return run_ids


def test_replay_check__lists_the_runs_a_breaking_deploy_would_strand_and_exits_1(parked_runs, ran):
    deploy("check.order", breaking)
    before = snapshot()

    output, error = replay_check()

    assert error is not None
    assert "2 run(s) would hit NON_DETERMINISTIC" in str(error)
    for run_id in parked_runs:
        assert f"NON_DETERMINISTIC  {run_id}  check.order (running) at step 'charge'" in output
    assert "'check.charge_v2'" in output
    assert ran == []  # no step function ran
    assert snapshot() == before  # nothing written


def test_replay_check__passes_code_that_replays_every_recorded_key_the_same(parked_runs, ran):
    deploy("check.order", compatible)
    before = snapshot()

    output, error = replay_check("--verbosity", "2")

    assert error is None
    assert "Checked 2 running/suspended/failed run(s): 0 would hit NON_DETERMINISTIC" in output
    assert output.count("OK  ") == 2
    assert ran == []
    assert snapshot() == before  # the patch decided False without recording a marker


def test_replay_check__workflow_and_limit_narrow_what_is_checked(parked_runs, ran):
    deploy("check.order", breaking)

    @pw.workflow("check.other")
    def other(wf, input):
        wf.do("charge", "check.charge_v1")
        wf.sleep("cool-off", "1h")

    other_run = pw.start_workflow("check.other", {})
    drain_queue()

    output, error = replay_check("--workflow", "check.other")
    assert error is None
    assert "Checked 1 " in output

    output, error = replay_check("--limit", "1")
    assert "Checked 1 " in output
    assert error is None  # the most recent run is check.other's, which is fine
    assert other_run not in output

    output, error = replay_check("--workflow", "check.order", "--limit", "1")
    assert error is not None and "1 run(s)" in str(error)


def test_replay_check__says_what_else_it_found_without_failing(ran):
    @pw.workflow("check.gone")
    def gone(wf, input):
        wf.sleep("nap", "1h")

    @pw.workflow("check.raises")
    def raises(wf, input):
        wf.sleep("nap", "1h")

    gone_run = pw.start_workflow("check.gone", {})
    raises_run = pw.start_workflow("check.raises", {})
    drain_queue()
    registry.workflows.pop("check.gone")

    def now_raises(wf, input):
        raise KeyError("missing")

    deploy("check.raises", now_raises)

    output, error = replay_check()

    assert error is None
    assert f"WORKFLOW_NOT_FOUND  {gone_run}" in output
    assert f"BODY_ERROR  {raises_run}" in output
    assert "2 other problem(s)" in output


def test_replay_check__a_graph_run_needs_only_its_stored_definition(ran):
    from pikku_workflows.models import WorkflowVersion

    definition = {"entry": "a", "nodes": {"a": {"function": "check.ship", "retries": 0}}}
    pw.graph_workflow("check.graph", definition)
    on_v1 = pw.start_workflow("check.graph", {})
    on_v1_again = pw.start_workflow("check.graph", {"again": True})
    registry.workflows.pop("check.graph")
    pw.graph_workflow("check.graph", {**definition, "description": "v2"})
    on_v2 = pw.start_workflow("check.graph", {})

    output, error = replay_check("--verbosity", "2")
    assert error is None
    assert output.count("OK  ") == 3  # v1 runs go on from their stored definition

    WorkflowVersion.objects.filter(name="check.graph", definition=definition).delete()
    output, error = replay_check()

    assert error is None
    assert f"VERSION_NOT_FOUND  {on_v1}  check.graph" in output
    assert f"VERSION_NOT_FOUND  {on_v1_again}  check.graph" in output
    assert on_v2 not in output


def test_replay_check__skips_runs_a_replay_already_stopped(parked_runs, ran):
    """A run that failed NON_DETERMINISTIC under an earlier deploy is stranded already: it is
    counted, not checked, so CI can run the check on every deploy."""
    deploy("check.order", breaking)
    stopped, parked = parked_runs
    error = {"code": "NON_DETERMINISTIC", "message": "Replay asked for ...", "step_key": "charge"}
    WorkflowRun.objects.filter(pk=stopped).update(status="failed", error=error)

    output, failure = replay_check()

    assert failure is not None and "1 run(s) would hit" in str(failure)
    assert f"NON_DETERMINISTIC  {parked}" in output and stopped not in output
    assert "; skipped 1 already stopped by NON_DETERMINISTIC." in output


def test_replay_check__status_and_since_narrow_what_is_checked(parked_runs, ran):
    deploy("check.order", breaking)
    older, newer = parked_runs
    WorkflowRun.objects.filter(pk=older).update(
        status="suspended", created_at=timezone.now() - timedelta(days=10)
    )

    output, error = replay_check("--status", "suspended")
    assert "Checked 1 suspended run(s): 1 would hit" in output and older in output

    output, error = replay_check("--status", "running,failed", "--since", "7d")
    assert "Checked 1 running/failed run(s): 1 would hit" in output and newer in output

    since = (timezone.now() - timedelta(days=3)).date().isoformat()
    output, error = replay_check("--since", since, "--status", "suspended")
    assert "Checked 0 suspended run(s): 0 would hit" in output and error is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--status", "completed"), "--status completed: a check replays runs that are"),
        (("--since", "last week"), "--since 'last week': give a duration (2h, 3d) or a date"),
    ],
)
def test_replay_check__refuses_what_it_cannot_read(args, says):
    with pytest.raises(CommandError, match=re.escape(says)):
        call_command("pikku_replay_check", *args, stdout=StringIO())
