"""Queued runs in the admin: the list's badge, status filter and waiting column, and the run
page saying why the run is queued (its key and the runs holding it)."""

from __future__ import annotations

import uuid
from html import unescape

import pytest

import pikku_workflows as pw
from tests.admin_support import CHANGELIST, change_url, listed_ids

pytestmark = pytest.mark.django_db


@pytest.fixture
def queued() -> tuple[str, str]:
    @pw.workflow("admin_flow.sync", concurrency=pw.Concurrency(key=lambda input: input["t"]))
    def sync(wf, input):
        return input

    holder = pw.start_workflow("admin_flow.sync", {"t": "tenant-7"})
    return holder, pw.start_workflow("admin_flow.sync", {"t": "tenant-7"})


def test_run_list__filters_queued_runs_and_says_they_wait_on_admission(admin_client, queued):
    _holder, waiting = queued

    response = admin_client.get(CHANGELIST, {"status__exact": "queued", "level": "all"})

    assert listed_ids(response) == {uuid.UUID(waiting)}
    content = unescape(response.content.decode())
    assert 'pikku-status-queued">Queued<' in content
    assert "admission (queued)" in content
    assert "tenant-7" in content


def test_run_page__says_why_a_run_is_queued_naming_the_runs_holding_its_key(admin_client, queued):
    holder, waiting = queued

    content = unescape(admin_client.get(change_url(waiting)).content.decode())

    assert "its concurrency key is full" in content
    assert "held by run" in content
    assert f'title="{holder}"' in content


def test_run_page__says_a_debounced_run_waits_for_its_window_and_shows_each_join(admin_client):
    @pw.workflow("admin_flow.hook", debounce=pw.Debounce(key="shop-3", quiet="1h"))
    def hook(wf, input):
        return input

    waiting = pw.start_workflow("admin_flow.hook", {"n": 1})
    pw.start_workflow("admin_flow.hook", {"n": 2})

    content = unescape(admin_client.get(change_url(waiting)).content.decode())

    assert "key <code>shop-3</code>: its debounce window is open, not before" in content
    # The audit trail lists the start that joined it.
    assert "a start with the same debounce key joined this run" in content
