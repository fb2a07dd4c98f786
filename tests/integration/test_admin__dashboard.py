"""The admin's dashboard: its charts over the chosen window count reachable states, every
link leads to the run list filtered to what it counts, and it is for those who may view runs."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from pikku_workflows.models import WorkflowApproval, WorkflowRun
from pikku_workflows.status import RunStatus
from tests.admin_support import listed_ids, staff_client
from tests.shop import Shop

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:pikku_workflows_workflowrun_dashboard")
TITLES = [
    "Runs started",
    "Runs finished",
    "Failure rate by workflow",
    "Step duration by function",
    "Queue lag (queued to started)",
    "Approvals pending, by age",
]


def links(html: str) -> list[str]:
    return [unescape(href) for href in re.findall(r'<a href="([^"]+)"', html)]


def chart(html: str, title: str) -> str:
    """The markup of the chart titled `title`."""
    start = html.rindex("<section", 0, html.index(f">{title}</a></h2>"))
    return html[start : html.index("</section>", start)]


def test_dashboard__charts_of_the_window(django_user_model: Any, shop: Shop) -> None:
    done = shop.start()
    failed = shop.failed()
    shop.awaiting(approvers=["boss"])
    client = staff_client(django_user_model, "ops", "view_workflowrun")
    response = client.get(DASHBOARD)
    assert response.status_code == 200
    html = response.content.decode()
    assert [title for title in TITLES if f">{title}</a></h2>" in html] == TITLES
    assert html.count('class="pikku-chart"') == len(TITLES)

    rates = chart(html, "Failure rate by workflow")
    assert f"{shop.workflow} (1/2)" in rates
    failing = [link for link in links(rates) if "workflow__exact" in link]
    assert listed_ids(client.get(failing[0])) == {failed.pk}

    durations = chart(html, "Step duration by function")
    assert f"{shop.prefix}.charge" in durations and "p95" in durations

    # The last interval's column: the runs started in it, and no others.
    started = links(chart(html, "Runs started"))[-1]  # the first is the title's
    assert "created_at__gte" in started
    assert listed_ids(client.get(started)) == {done.pk, failed.pk, *approval_runs()}

    waiting = links(chart(html, "Approvals pending, by age"))
    assert listed_ids(client.get(waiting[-1])) == set(approval_runs())


def approval_runs() -> list[Any]:
    return list(WorkflowRun.objects.filter(status=RunStatus.RUNNING).values_list("pk", flat=True))


def test_dashboard__every_link_opens_the_run_list(django_user_model: Any, shop: Shop) -> None:
    shop.start()
    shop.failed()
    client = staff_client(django_user_model, "ops", "view_workflowrun")
    for window in ("1h", "24h", "7d", "30d"):
        html = client.get(DASHBOARD, {"window": window}).content.decode()
        # Each chart's title and its first and last marks: the others differ only in times.
        sampled = set()
        for title in TITLES:
            found = links(chart(html, title))
            sampled |= {*found[:2], found[-1]}
        for link in sampled:
            response = client.get(link)
            assert response.status_code == 200, link
            # The admin answers an unknown filter by redirecting with `?e=1`.
            assert "e=1" not in response.get("Location", ""), link


def test_dashboard__approvals_by_how_long_they_waited(django_user_model: Any, shop: Shop) -> None:
    old = shop.awaiting(approvers=["boss"])
    shop.awaiting(approvers=["boss"])
    WorkflowApproval.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=5)
    )
    client = staff_client(django_user_model, "ops", "view_workflowrun")
    approvals = chart(client.get(DASHBOARD).content.decode(), "Approvals pending, by age")
    assert re.search(r"&lt; 1 h pending: 1<", approvals)
    assert re.search(r"4-24 h pending: 1<", approvals)
    assert re.search(r"1-4 h pending: 0<", approvals)


def test_dashboard__only_for_those_who_may_view_runs(django_user_model: Any) -> None:
    client = staff_client(django_user_model, "clerk")
    assert client.get(DASHBOARD).status_code == 403


def test_dashboard__linked_from_the_run_list(django_user_model: Any) -> None:
    client = staff_client(django_user_model, "ops", "view_workflowrun")
    changelist = reverse("admin:pikku_workflows_workflowrun_changelist")
    assert f'href="{DASHBOARD}"' in client.get(changelist).content.decode()
