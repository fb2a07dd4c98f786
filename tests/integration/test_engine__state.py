"""`wf.set_state` / `wf.state`: the values set so far in this pass, and the map stored on the run."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.status import RunStatus
from tests.rows import load_run

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_state__is_what_was_set_so_far_in_this_pass_and_is_stored_on_the_run():
    seen = []

    @pw.workflow("state.stages")
    def stages(wf, input):
        seen.append(("start", dict(wf.state)))
        wf.set_state("stage", "charged")
        wf.set_state("items", (1, 2))
        seen.append(("middle", dict(wf.state)))
        wf.suspend("hold")
        wf.set_state("stage", "shipped")
        seen.append(("end", dict(wf.state)))
        return wf.state["stage"]

    run_id = pw.start_workflow("state.stages", {}, inline=True)
    assert load_run(run_id).state == {"stage": "charged", "items": [1, 2]}

    pw.resume_run(run_id)
    orchestrate(run_id)

    # The replay starts from an empty state even though the run's stored map is full.
    assert seen == [
        ("start", {}),
        ("middle", {"stage": "charged", "items": [1, 2]}),
        ("start", {}),
        ("middle", {"stage": "charged", "items": [1, 2]}),
        ("end", {"stage": "shipped", "items": [1, 2]}),
    ]
    run = load_run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "shipped")
    assert run.state == {"stage": "shipped", "items": [1, 2]}


def test_state__is_read_only_in_the_body():
    @pw.workflow("state.read_only")
    def read_only(wf, input):
        wf.state["x"] = 1

    run_id = pw.start_workflow("state.read_only", {}, inline=True)

    run = load_run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error["code"] == "TypeError"
    assert run.state == {}


@pytest.mark.parametrize("value", [float("nan"), object(), "nul\x00"], ids=["nan", "object", "nul"])
def test_state__unstorable_value_fails_the_run_with_invalid_input(value):
    @pw.workflow("state.unstorable")
    def unstorable(wf, input):
        wf.set_state("bad", value)

    run_id = pw.start_workflow("state.unstorable", {}, inline=True)

    run = load_run(run_id)
    assert (run.status, run.error["code"], run.state) == (RunStatus.FAILED, "INVALID_INPUT", {})
