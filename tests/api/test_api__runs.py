"""Reading runs: the list (summaries, include, cursor pagination), detail, timeline and state."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.api.conftest import API
from tests.factories import WorkflowRunFactory

pytestmark = pytest.mark.django_db


def run_url(run, suffix: str = "") -> str:
    return f"{API}runs/{run.pk}/{suffix}"


def listed(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["results"]]


def test_list__items_are_the_summary_from_the_run_row(shop, operator_api):
    run = shop.start(amount=4)

    item = operator_api.get(API + "runs/").json()["results"][0]

    summary = pw.get_run_status(run.pk)
    same = ("id", "workflow", "status", "started_at", "finished_at", "started_by", "error")
    same += ("planned_steps", "compensation")
    assert {key: item[key] for key in same} == {key: summary[key] for key in same}
    assert (item["steps_total"], item["steps_done"]) == (len(summary["steps"]), 3)
    assert (item["current_step_key"], item["waiting_on"]) == (summary["steps"][-1]["key"], None)
    assert item["last_error_code"] is None
    assert "steps" not in item and "output" not in item


def test_list__items_say_what_a_live_run_waits_on(shop, operator_api):
    run = shop.start(review=True, amount=4)

    item = operator_api.get(API + "runs/").json()["results"][0]

    assert item["status"] == "suspended"
    assert item["waiting_on"] == {"kind": "suspend"}
    assert item["waiting_on"]["kind"] == pw.get_run_status(run.pk)["waiting_on"]["kind"]


def test_list__include_adds_input_and_output(shop, operator_api):
    run = shop.start(amount=4)

    both = operator_api.get(API + "runs/?include=input,output").json()["results"][0]
    output_only = operator_api.get(API + "runs/?include=output").json()["results"][0]
    repeated = operator_api.get(API + "runs/?include=input&include=output").json()["results"][0]

    assert both["input"] == {"amount": 4}
    assert both["output"] == pw.get_run_status(run.pk)["output"] == output_only["output"]
    assert "input" not in output_only
    assert repeated == both


def test_list__unknown_include_is_invalid_input(operator_api):
    response = operator_api.get(API + "runs/?include=state")

    assert response.status_code == 400
    assert "include" in response.json()["fields"]


def test_list__newest_first_then_oldest_first_with_ordering(operator_api):
    now = timezone.now()
    runs = [WorkflowRunFactory() for _ in range(3)]
    for age, run in enumerate(runs):
        WorkflowRun.objects.filter(pk=run.pk).update(created_at=now - timedelta(minutes=age))

    newest_first = listed(operator_api.get(API + "runs/"))
    oldest_first = listed(operator_api.get(API + "runs/?ordering=created_at"))

    assert newest_first == [str(run.pk) for run in runs]
    assert oldest_first == newest_first[::-1]
    assert listed(operator_api.get(API + "runs/?ordering=-created_at")) == newest_first


def test_list__unknown_ordering_is_invalid_input(operator_api):
    response = operator_api.get(API + "runs/?ordering=status")

    assert response.status_code == 400
    assert "ordering" in response.json()["fields"]


@pytest.mark.parametrize("ordering", ["", "created_at"])
def test_list__cursor_pages_cover_every_run_once_even_with_tied_creation_times(
    operator_api, ordering
):
    moment = timezone.now()
    runs = [WorkflowRunFactory() for _ in range(7)]
    # Ties on created_at: the id breaks them, so no run is repeated or skipped across pages.
    WorkflowRun.objects.filter(pk__in=[r.pk for r in runs[:4]]).update(created_at=moment)
    seen: list[str] = []
    url = f"{API}runs/?page_size=3&ordering={ordering}"
    while url:
        response = operator_api.get(url)
        seen += listed(response)
        assert len(response.json()["results"]) <= 3
        url = response.json()["next"]

    assert sorted(seen) == sorted(str(run.pk) for run in runs)
    assert len(seen) == len(set(seen))


def test_list__previous_cursor_goes_back_to_the_same_page(operator_api):
    for _ in range(5):
        WorkflowRunFactory()
    first = operator_api.get(API + "runs/?page_size=2")
    second = operator_api.get(first.json()["next"])

    back = operator_api.get(second.json()["previous"])

    assert listed(back) == listed(first)


def test_list__page_size_is_bounded(operator_api, monkeypatch):
    from pikku_workflows.api.pagination import RunCursorPagination

    monkeypatch.setattr(RunCursorPagination, "max_page_size", 3)
    for _ in range(5):
        WorkflowRunFactory()

    assert len(listed(operator_api.get(API + "runs/?page_size=1000"))) == 3
    assert len(listed(operator_api.get(API + "runs/?page_size=2"))) == 2


@pytest.mark.parametrize(
    "cursor",
    [
        "not-base64!",
        "cD1ub3QtYS1kYXRl",  # base64 of "p=not-a-date": a position that is no moment
        "bz0xJnI9MSZwPTIwMjYtMTMtNDU=",  # "o=1&r=1&p=2026-13-45"
    ],
)
def test_list__malformed_cursor_is_invalid_input(operator_api, cursor):
    WorkflowRunFactory()

    response = operator_api.get(API + f"runs/?cursor={cursor}")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert "cursor" in response.json()["fields"]


def test_detail__is_the_engine_status_summary(shop, operator_api):
    run = shop.start(amount=2)

    response = operator_api.get(run_url(run))

    assert response.status_code == 200
    assert response.json() == pw.get_run_status(run.pk)
    assert response.json()["output"] == {"charge": {"charged": 2}, "ship": "shipped"}


@pytest.mark.parametrize("run_id", ["not-a-uuid", "00000000-0000-4000-8000-000000000000"])
def test_detail__unknown_or_malformed_id_is_run_not_found(operator_api, run_id):
    response = operator_api.get(f"{API}runs/{run_id}/")

    assert response.status_code == 404
    assert response.json()["code"] == "RUN_NOT_FOUND"


def test_timeline__is_the_engine_timeline(shop, operator_api):
    run = shop.failed()
    pw.retry_run(run.pk)

    response = operator_api.get(run_url(run, "timeline/"))

    assert response.status_code == 200
    assert response.json() == pw.get_run_timeline(run.pk)
    assert response.json()[-1]["event"] == "retry"


def test_state__at_a_seq_a_datetime_and_by_default(shop, operator_api):
    run = shop.start()
    timeline = pw.get_run_timeline(run.pk)
    moment = timeline[3]["at"]

    at_seq = operator_api.get(run_url(run, "state/"), {"at": "3"})
    at_moment = operator_api.get(run_url(run, "state/"), {"at": moment})
    latest = operator_api.get(run_url(run, "state/"))

    assert at_seq.json() == pw.reconstruct_run_state(run.pk, at=3)
    assert at_moment.json() == pw.reconstruct_run_state(run.pk, at=moment)
    assert latest.json() == pw.reconstruct_run_state(run.pk)
    assert latest.json()["phase"] == "completed"


@pytest.mark.parametrize("at", ["999", "-2", "yesterday", "2026-13-45T00:00:00", "9" * 65])
def test_state__at_outside_the_timeline_or_malformed_is_invalid_input(shop, operator_api, at):
    run = shop.start()

    response = operator_api.get(run_url(run, "state/"), {"at": at})

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
