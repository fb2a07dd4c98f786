"""Starting a run from the admin (a page of registered workflows with a JSON input, gated by
`add_workflowrun`, `started_by` recorded, queued), the "Start <workflow>" link of a host model's
inline, the Workers page, the banner when no timer loop is seen, and the system checks that
warn about a deploy without pikku_worker."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Permission
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.checks import check_timer_loop_running, check_worker_command
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowWorker
from project.demo.models import Order
from project.demo.scenarios import SLOW_CHARGE_SECONDS
from tests.admin_support import CHANGELIST, change_url, staff_client
from tests.factories import WorkflowRunFactory, WorkflowStepFactory
from tests.shop import Shop

pytestmark = pytest.mark.django_db

START = reverse("admin:pikku_workflows_workflowrun_start")
WORKERS = reverse("admin:pikku_workflows_workflowworker_changelist")


def a_live_worker(**fields: Any) -> WorkflowWorker:
    now = timezone.now()
    values = {"host": "web-1", "pid": 4242, "cluster": "pikku", "started_at": now}
    return WorkflowWorker.objects.create(**{**values, "last_seen_at": now, **fields})


def test_start__the_page_lists_registered_workflows_and_starts_one_queued(admin_client, shop):
    page = admin_client.get(START)
    assert page.status_code == 200
    content = page.content.decode()
    assert "admin_tests.order" in content and "order_fulfilment" in content
    assert "reserve</code> → <code" in content  # its planned steps

    response = admin_client.post(
        START, {"workflow": "admin_tests.order", "input": '{"items": ["lamp"]}'}
    )

    run = WorkflowRun.objects.get(workflow="admin_tests.order")
    assert response.status_code == 302 and response["Location"] == change_url(run)
    assert (run.input, run.started_by.username, run.status) == (
        {"items": ["lamp"]},
        "admin",
        "running",
    )
    assert not WorkflowStep.objects.filter(run=run).exists()  # queued: no body ran in the request
    assert shop.calls == []


def test_start__the_run_list_links_to_it(admin_client):
    assert f'href="{START}"' in admin_client.get(CHANGELIST).content.decode()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"items": [', "Not valid JSON: Expecting value (line 1, column 12)."),
        ('{"amount": NaN}', "not storable JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 256 levels"),
        ("[" * 300 + "]" * 300, "nested deeper than 256 levels"),
    ],
)
def test_start__bad_input_is_a_form_error_and_starts_nothing(admin_client, shop, text, problem):
    response = admin_client.post(START, {"workflow": "admin_tests.order", "input": text})

    assert response.status_code == 200
    assert problem in " ".join(response.context["form"].errors["input"])
    assert not WorkflowRun.objects.exists()


def test_start__needs_the_add_permission(django_user_model, shop):
    viewer = staff_client(django_user_model, "viewer", "view_workflowrun")
    assert viewer.get(START).status_code == 403
    assert viewer.post(START, {"workflow": "admin_tests.order", "input": "{}"}).status_code == 403
    assert f'href="{START}"' not in viewer.get(CHANGELIST).content.decode()
    starter = staff_client(django_user_model, "starter", "view_workflowrun", "add_workflowrun")
    assert starter.post(START, {"workflow": "admin_tests.order", "input": "{}"}).status_code == 302
    assert WorkflowRun.objects.get().started_by.username == "starter"


def test_start__from_a_host_inline_for_its_subject_with_the_input_prefilled(admin_client):
    order = Order.objects.create(customer="Grace", amount=Decimal("99.50"))

    content = admin_client.get(reverse("admin:demo_order_change", args=[order.pk])).content
    links = re.findall(r'href="([^"]+)">Start order_fulfilment', content.decode())

    [link] = links
    query = parse_qs(urlsplit(link.replace("&amp;", "&")).query)
    assert query["workflow"] == ["order_fulfilment"]
    page = admin_client.get(link.replace("&amp;", "&"))
    assert page.context["subject"] == order
    assert f'"order_id": {order.pk}' in page.context["form"]["input"].value()
    response = admin_client.post(
        START,
        {
            "workflow": "order_fulfilment",
            "input": page.context["form"]["input"].value(),
            "subject": query["subject"][0],
        },
    )
    assert response.status_code == 302
    run = WorkflowRun.objects.get()
    assert (run.subject, run.input["amount"]) == (order, 99.5)


def test_start__no_start_link_without_the_permission(django_user_model):
    order = Order.objects.create(customer="Alan", amount=Decimal("1.00"))
    clerk = django_user_model.objects.create_user("clerk", password="x", is_staff=True)
    clerk.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_order", "change_order", "view_workflowrun"])
    )
    client = Client()
    client.force_login(clerk)

    content = client.get(reverse("admin:demo_order_change", args=[order.pk])).content.decode()

    assert "Workflow runs" in content and "Start order_fulfilment" not in content


def test_workers__the_page_lists_workers_and_their_heartbeats(admin_client):
    a_live_worker(steps_in_flight=3)
    a_live_worker(pid=7, host="web-2", last_seen_at=timezone.now() - timedelta(minutes=5))

    content = admin_client.get(WORKERS).content.decode()

    assert "web-1" in content and "4242" in content and ">3<" in content
    assert 'pikku-worker-live">live' in content and "pikku-worker-silent" in content
    assert "pikku-worker-warning" not in content  # web-1 was seen just now


@pytest.mark.parametrize(("seconds_ago", "state"), [(25, "live"), (35, "not seen")])
def test_workers__a_worker_is_not_seen_after_three_missed_heartbeats(
    admin_client, seconds_ago, state
):
    """WORKER_HEARTBEAT_SECONDS is 10: silent for 30 s, a worker was killed (or hangs)."""
    a_live_worker(last_seen_at=timezone.now() - timedelta(seconds=seconds_ago))

    content = admin_client.get(WORKERS).content.decode()

    [shown] = re.findall(r'class="pikku-badge pikku-worker-\w+"[^>]*>([^<]+)<', content)
    assert shown == state


def test_banner__run_pages_warn_while_no_timer_loop_is_seen(admin_client, shop):
    run = shop.start(sleep="1h")
    a_live_worker(last_seen_at=timezone.now() - timedelta(minutes=3))

    for url in (CHANGELIST, change_url(run), WORKERS):
        content = admin_client.get(url).content.decode()
        assert 'id="pikku-worker-warning"' in content, url
        assert "sleeps, retry backoffs and recovery wait" in content
        # Three pages later the moment may read "3 min 2 s ago": seconds show below 10 min.
        assert re.search(
            r"the last one was seen 3 min( \d+ s)? ago", re.sub(r"<[^>]+>", "", content)
        )
    WorkflowWorker.objects.update(last_seen_at=timezone.now())
    assert 'id="pikku-worker-warning"' not in admin_client.get(change_url(run)).content.decode()


def test_checks__django_q2s_qcluster_alone_is_warned_about(monkeypatch):
    monkeypatch.setattr("sys.argv", ["manage.py", "qcluster"])
    [warning] = check_worker_command()
    assert warning.id == "pikku_workflows.W006"
    monkeypatch.setattr("sys.argv", ["manage.py", "pikku_worker"])
    assert check_worker_command() == []


def test_checks__overdue_timers_and_no_worker_seen_are_warned_about(shop: Shop):
    run = WorkflowRunFactory(workflow="admin_tests.order")
    assert check_timer_loop_running(databases=["default"]) == []
    WorkflowStepFactory(
        run=run,
        kind="sleep",
        status="scheduled",
        wake_at=timezone.now() - timedelta(minutes=5),
    )

    [warning] = check_timer_loop_running(databases=["default"])
    assert warning.id == "pikku_workflows.W007"
    assert "1 timer(s)" in warning.msg
    a_live_worker()
    assert check_timer_loop_running(databases=["default"]) == []
    assert pw.get_run_status(run.pk)["status"] == "running"


def test_checks__the_timer_loop_is_checked_by_check_database_only(shop: Shop):
    run = WorkflowRunFactory(workflow="admin_tests.order")
    WorkflowStepFactory(
        run=run, kind="sleep", status="scheduled", wake_at=timezone.now() - timedelta(minutes=5)
    )

    def warned(**options: Any) -> bool:
        return any(message.id == "pikku_workflows.W007" for message in run_checks(**options))

    # What runserver and every other command run: no database named (Django 6.1 also leaves
    # database checks out by itself; 5.2 calls them with databases=None).
    assert check_timer_loop_running(databases=None) == []
    assert not warned()
    assert warned(databases=["default"])  # check --database default, migrate


def test_start__a_demo_orders_prefill_carries_its_scenario(admin_client):
    """The slow order started again from its page charges slowly again: time to kill a worker."""
    order = Order.objects.create(customer="Edsger Dijkstra", amount=Decimal("7.00"))

    content = admin_client.get(reverse("admin:demo_order_change", args=[order.pk])).content
    [link] = re.findall(r'href="([^"]+)">Start order_fulfilment', content.decode())
    page = admin_client.get(link.replace("&amp;", "&"))

    prefilled = json.loads(page.context["form"]["input"].value())
    assert prefilled == {
        "order_id": order.pk,
        "items": ["book"],
        "amount": 7.0,
        "work_seconds": SLOW_CHARGE_SECONDS,
    }
    assert SLOW_CHARGE_SECONDS >= 120
