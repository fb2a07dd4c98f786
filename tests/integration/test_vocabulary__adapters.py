"""One vocabulary across the admin, the HTTP API and the `pikku` command: a step a cancel
stopped is "cancelled" in all three, a run no worker took says it waits for a worker (and that
none was seen), the lists show top-level runs unless asked; and the engine's internals (its own
step keys, attempts of steps never tried again, "dsl") do not leak onto the pages."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowWorker
from tests.admin_support import CHANGELIST, change_url
from tests.shop import Shop

pytestmark = pytest.mark.django_db


def pikku(*args: str) -> str:
    out = StringIO()
    call_command("pikku", *args, stdout=out)
    return out.getvalue()


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def step_row(content: str, step_key: str) -> str:
    match = re.search(
        rf'<tr class="pikku-step[^"]*" data-step-key="{re.escape(step_key)}">(.*?)</tr>',
        content,
        re.S,
    )
    assert match is not None, step_key
    return text_of(match.group(1))


def test_vocabulary__a_sleep_the_cancel_stopped_is_cancelled_everywhere(admin_client, shop: Shop):
    run = shop.start(sleep="1h")
    pw.cancel_run(run.pk, reason="customer called")

    api = admin_client.get(reverse("pikku_workflows_api:run-detail", args=[run.pk])).json()
    assert {step["key"]: step["status"] for step in api["steps"]}["cool-off"] == "cancelled"
    shown = json.loads(pikku("show", str(run.pk), "--json"))
    assert {step["key"]: step["status"] for step in shown["steps"]}["cool-off"] == "cancelled"
    assert re.search(r"^cool-off\s+cancelled\s", pikku("show", str(run.pk)), re.M)
    page = admin_client.get(change_url(run)).content.decode()
    assert "Cancelled" in step_row(page, "cool-off")


@pytest.mark.parametrize(("worker_seen", "words"), [(False, " (none seen)"), (True, "")])
def test_vocabulary__a_run_no_worker_took_waits_for_a_worker(
    admin_client, shop: Shop, worker_seen: bool, words: str
):
    run_id = pw.start_workflow(shop.workflow, {})  # queued; no worker takes its first pass
    if worker_seen:
        now = timezone.now()
        WorkflowWorker.objects.create(
            host="worker-1", pid=1, cluster="pikku", started_at=now, last_seen_at=now
        )

    assert pw.get_run_status(run_id)["waiting_on"] == {"kind": "pass"}
    expected = f"waiting for a worker{words}"
    listing = text_of(admin_client.get(CHANGELIST).content.decode())
    assert expected in listing and (words or "(none seen)" not in listing)
    page = admin_client.get(change_url(run_id)).content.decode()
    assert expected in text_of(page)
    line = next(line for line in pikku("runs").splitlines() if line.startswith(run_id[:8]))
    assert line.endswith(expected)
    assert f"waits on  {expected}" in pikku("show", run_id)


def test_vocabulary__the_pikku_command_lists_top_level_runs_like_the_admin(shop: Shop):
    parent = shop.start(invoice="1h")  # its invoice is a child run, sleeping
    child = WorkflowRun.objects.get(parent_run=parent)

    listed = {run["id"] for run in json.loads(pikku("runs", "--json"))}
    everything = {run["id"] for run in json.loads(pikku("runs", "--level", "all", "--json"))}
    children = {run["id"] for run in json.loads(pikku("runs", "--level", "children", "--json"))}

    assert listed == {str(parent.pk)}
    assert everything == {str(parent.pk), str(child.pk)}
    assert children == {str(child.pk)}


def lane_labels(content: str) -> list[str]:
    return [
        text_of(label)
        for label in re.findall(r'<div class="pikku-lane-label"[^>]*>(.*?)</div>', content, re.S)
    ]


def test_internals__the_run_page_speaks_the_bodys_words(admin_client, shop: Shop):
    run = shop.start(review=True, sleep="1h")  # suspended for manual review
    pw.resume_run(run.pk)
    from pikku_workflows.testing import drain

    drain(str(run.pk))  # on to the sleep
    pw.cancel_run(run.pk, reason="done looking")

    page = admin_client.get(change_url(run)).content.decode()

    labels = lane_labels(page)
    assert "wf.suspend manual review" in labels and "cool-off" in labels
    assert not any("__suspend" in label for label in labels)
    # A suspend and a sleep are not tried again, and hold no work to fork from.
    for key in ("__suspend:manual review", "cool-off"):
        row = step_row(page, key)
        assert " / " not in row and "Fork from here" not in row, row
    assert "Fork from here" in step_row(page, "charge")
    assert re.search(r"\b1 / 1\b", step_row(page, "charge"))


def test_internals__a_code_workflow_is_called_so(admin_client, shop: Shop):
    shop.start()

    start_page = text_of(
        admin_client.get(reverse("admin:pikku_workflows_workflowrun_start")).content.decode()
    )
    versions = text_of(
        admin_client.get(
            reverse("admin:pikku_workflows_workflowversion_changelist")
        ).content.decode()
    )

    assert "Code workflow" in start_page and " dsl " not in f" {start_page} "
    assert "Code workflow" in versions and " DSL " not in f" {versions} "
