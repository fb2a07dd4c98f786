"""The API shows gathers and compensation as the engine's summary does: each step names the
gather it is a member of, and the run where undoing its steps stands."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.testing import drain
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def workflows() -> None:
    @pw.step_function("api_g.square")
    def square(data: int, ctx: pw.StepContext) -> int:
        return data * data

    @pw.step_function("api_g.unbook")
    def unbook(data: dict[str, Any], ctx: pw.StepContext) -> None:
        return None

    @pw.step_function("api_g.book", compensate="api_g.unbook")
    def book(data: str, ctx: pw.StepContext) -> str:
        return data

    @pw.workflow("api_g.fan")
    def fan(wf: pw.Workflow, input: dict[str, Any]) -> list:
        wf.do("first", "api_g.square", 1)
        return wf.map("sq", "api_g.square", [2, 3])

    @pw.workflow("api_g.trip")
    def trip(wf: pw.Workflow, input: dict[str, Any]) -> None:
        wf.do("hotel", "api_g.book", "h-1")
        raise RuntimeError("no flights")


def test_summary__each_step_names_its_gather(operator_api):
    run_id = pw.start_workflow("api_g.fan", {}, inline=True)
    summary = operator_api.get(f"{API}runs/{run_id}/").json()
    assert [(step["key"], step["gather"]) for step in summary["steps"]] == [
        ("first", None),
        ("sq[0]", "sq"),
        ("sq[1]", "sq"),
    ]
    assert summary["compensation"] is None
    listed = operator_api.get(f"{API}runs/").json()["results"][0]
    assert (listed["steps_total"], listed["steps_done"]) == (3, 3)


def test_summary__says_where_undoing_the_steps_stands(operator_api):
    run_id = pw.start_workflow("api_g.trip", {})
    drain(run_id)
    summary = operator_api.get(f"{API}runs/{run_id}/").json()
    assert (summary["status"], summary["compensation"]) == ("failed", "compensated")
    assert [step["key"] for step in summary["steps"]] == ["hotel", "hotel:compensate"]
