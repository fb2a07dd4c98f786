"""The run page shows gathers as what they are (a map's items folded into one timeline row with
counts, opened on a click; a gather's members marked as one) and compensation: the steps that
undo others, where the undo stands, and a retry that says it retries the compensations."""

from __future__ import annotations

import re
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import drain
from tests.admin_support import change_url
from tests.integration.test_admin__run_page import field, text_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def workflows() -> None:
    @pw.step_function("adm.square")
    def square(data: int, ctx: pw.StepContext) -> int:
        return data * data

    @pw.step_function("adm.unbook")
    def unbook(data: dict[str, Any], ctx: pw.StepContext) -> None:
        if data["result"] == "refused":
            raise RuntimeError("the hotel does not answer")

    @pw.step_function("adm.book", compensate="adm.unbook")
    def book(data: str, ctx: pw.StepContext) -> str:
        return data

    @pw.workflow("adm.fan")
    def fan(wf: pw.Workflow, input: dict[str, Any]) -> list:
        squares = wf.map("sq", "adm.square", [1, 2, 3, 4, 5])
        pair = wf.gather(wf.call("a", "adm.square", 6), wf.call("b", "adm.square", 7))
        return [*squares, *pair]

    @pw.workflow("adm.trip")
    def trip(wf: pw.Workflow, input: dict[str, Any]) -> None:
        wf.do("hotel", "adm.book", input["hotel"])
        raise RuntimeError("no flights")


def page(admin_client: Any, run_id: str) -> str:
    response = admin_client.get(change_url(WorkflowRun.objects.get(pk=run_id)))
    assert response.status_code == 200
    return response.content.decode()


def test_timeline__a_map_s_items_fold_into_one_row_with_counts(admin_client):
    run_id = pw.start_workflow("adm.fan", {}, inline=True)
    html = page(admin_client, run_id)

    [group] = re.findall(
        r'<details class="pikku-lane-group" data-gather="sq\[…\]">(.*?)</details>', html, re.S
    )
    summary = group.split("</summary>")[0]
    assert "sq[…]" in text_of(summary) and ">5<" in summary
    assert summary.count("pikku-bar-running") == 5  # every item's bar, drawn over each other
    assert "5 items: 5 succeeded" in text_of(group)
    # The items' own lanes, opened on a click.
    labels = re.findall(r'class="pikku-lane-label" title="(sq\[\d\])"', group)
    assert labels == [f"sq[{i}]" for i in range(5)]


def test_timeline__a_gather_s_members_are_marked_as_one(admin_client):
    html = page(admin_client, pw.start_workflow("adm.fan", {}, inline=True))
    members = re.findall(r'<div class="pikku-lane pikku-lane-gathered[^"]*" data-gather="a">', html)
    assert len(members) == 2
    assert "members of one gather" in html
    steps = html.split('id="steps"')[1]
    assert steps.count("gather a</span>") == 2 and steps.count("gather sq</span>") == 5


def test_run_page__compensation_steps_and_where_the_undo_stands(admin_client):
    run_id = pw.start_workflow("adm.trip", {"hotel": "h-1"}, inline=True)
    drain(run_id)
    response = admin_client.get(change_url(WorkflowRun.objects.get(pk=run_id)))
    assert "Compensated" in field(response, "compensation_display")
    assert "undoing the steps for: no flights" in field(response, "compensation_display")
    steps = text_of(response.content.decode().split('id="steps"')[1].split("</table>")[0])
    assert "compensation of hotel" in steps


def test_run_page__a_failed_compensation_offers_to_retry_the_compensation(admin_client):
    run_id = pw.start_workflow("adm.trip", {"hotel": "refused"})
    drain(run_id, advance="1h")  # the compensation's retries, hours of backoff skipped
    html = page(admin_client, run_id)
    assert "Retry compensation" in html
    assert "compensation failed" in text_of(html).lower()

    plain = pw.start_workflow("adm.fan", {}, inline=True)
    assert "Retry compensation" not in page(admin_client, plain)
