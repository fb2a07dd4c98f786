"""Queued runs over HTTP: the status filter and counts, the summary's admission wait, and
cancel, suspend and resume of a queued run."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued() -> tuple[str, str]:
    @pw.workflow("api_flow.sync", concurrency=pw.Concurrency(key="only"))
    def sync(wf, input):
        return input

    holder = pw.start_workflow("api_flow.sync", {})
    return holder, pw.start_workflow("api_flow.sync", {})


def test_runs__filter_and_count_queued_runs_and_show_their_admission(operator_api, queued):
    holder, waiting = queued

    listed = operator_api.get(API + "runs/?status=queued").json()["results"]
    counts = operator_api.get(API + "runs/counts/?group_by=status").json()

    assert [item["id"] for item in listed] == [waiting]
    # A list item reads the run row (its kind of wait); the run's own summary says why.
    assert listed[0]["waiting_on"] == {"kind": "admission", "step_key": None}
    assert operator_api.get(API + f"runs/{waiting}/").json()["waiting_on"] == {
        "kind": "admission",
        "reason": "concurrency",
        "key": "only",
        "held_by": [holder],
    }
    assert {g["status"]: g["count"] for g in counts["groups"]} == {"queued": 1, "running": 1}


def test_runs__a_queued_run_is_suspended_resumed_into_its_queue_and_cancelled(operator_api, queued):
    _holder, waiting = queued

    suspended = operator_api.post(f"{API}runs/{waiting}/suspend/", {}, format="json")
    resumed = operator_api.post(f"{API}runs/{waiting}/resume/", {}, format="json")
    cancelled = operator_api.post(f"{API}runs/{waiting}/cancel/", {}, format="json")

    assert (suspended.status_code, suspended.json()["status"]) == (200, "suspended")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "queued")
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")


def test_start__a_start_within_the_debounce_window_answers_200_with_the_run_it_joined(
    operator_api, client_for, make_user
):
    @pw.workflow("api_flow.hook", debounce=pw.Debounce(key=lambda input: input["shop"], quiet="1h"))
    def hook(wf, input):
        return input

    starter = client_for(make_user("webhooks", "add_workflowrun"))
    first = operator_api.post(
        API + "definitions/api_flow.hook/runs/", {"input": {"shop": "a", "n": 1}}, format="json"
    )
    joined = starter.post(
        API + "definitions/api_flow.hook/runs/", {"input": {"shop": "a", "n": 2}}, format="json"
    )

    assert (first.status_code, joined.status_code) == (201, 200)
    summary = joined.json()
    assert summary["id"] == first.json()["id"]
    # The latest start is the run's now: its input, and its starter (who may read it).
    assert (summary["status"], summary["started_by"]) == ("queued", "webhooks")
    assert summary["waiting_on"]["reason"] == "debounce"
    assert pw.get_run_status(summary["id"])["waiting_on"]["key"] == "a"
