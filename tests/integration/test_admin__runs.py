"""The read-only run admin: list, filters, id search, the run page with steps and attempt
history, refused writes, permissions, and a query count that does not grow with the rows."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from pikku_workflows.engine.store.run_list_fields import refresh_list_fields
from pikku_workflows.models import WorkflowRun
from pikku_workflows.status import RunStatus, StepDispatch, StepStatus
from project.demo.models import Order
from tests.admin_support import change_url, listed_ids, staff_client
from tests.factories import WorkflowRunFactory, WorkflowStepFactory, WorkflowStepHistoryFactory

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:pikku_workflows_workflowrun_changelist")
ADD = reverse("admin:pikku_workflows_workflowrun_add")


@pytest.fixture
def viewer_client(django_user_model: Any) -> Client:
    return staff_client(django_user_model, "viewer", "view_workflowrun")


@pytest.fixture
def outsider_client(django_user_model: Any) -> Client:
    return staff_client(django_user_model, "outsider")


@pytest.fixture
def runs() -> dict[str, WorkflowRun]:
    """One run per status; the invoice run's id is fixed so prefix searches are deterministic."""
    now = timezone.now()
    return {
        "running": WorkflowRunFactory(workflow="order_fulfilment", status=RunStatus.RUNNING),
        "suspended": WorkflowRunFactory(workflow="order_fulfilment", status=RunStatus.SUSPENDED),
        "completed": WorkflowRunFactory(
            workflow="invoice",
            status=RunStatus.COMPLETED,
            id=uuid.UUID("abcd1234-0000-4000-8000-000000000001"),
            output={"invoice": "INV-1"},
            finished_at=now,
        ),
        "failed": WorkflowRunFactory(
            workflow="order_fulfilment",
            status=RunStatus.FAILED,
            id=uuid.UUID("abcd9999-0000-4000-8000-000000000002"),
            error={"code": "STEP_FAILED", "message": "card declined"},
            finished_at=now,
        ),
        "cancelled": WorkflowRunFactory(
            workflow="refund", status=RunStatus.CANCELLED, finished_at=now
        ),
    }


@pytest.fixture
def run_with_history() -> WorkflowRun:
    """A completed run: `charge` failed once then succeeded; `total` succeeded at once."""
    run = WorkflowRunFactory(
        workflow="order_fulfilment",
        status=RunStatus.COMPLETED,
        input={"order": 7, "items": ["book", "pen"]},
        output={"total": 10},
        planned_steps=["charge", "total", "ship"],
        finished_at=timezone.now(),
    )
    charge = WorkflowStepFactory(
        run=run,
        step_key="charge",
        function_name="payments.charge",
        status=StepStatus.SUCCEEDED,
        attempt=2,
        attempt_limit=6,
        result={"charged": 5},
        history=False,
    )
    WorkflowStepHistoryFactory(
        step=charge,
        attempt=1,
        status=StepStatus.FAILED,
        error={"code": "STEP_FAILED", "message": "gateway timeout", "traceback": "Traceback: boom"},
        failed_at=timezone.now(),
        dispatch=StepDispatch.IN_PLACE,
    )
    WorkflowStepHistoryFactory(
        step=charge, attempt=2, succeeded_at=timezone.now(), dispatch=StepDispatch.QUEUED
    )
    WorkflowStepFactory(
        run=run,
        step_key="total",
        function_name=None,
        status=StepStatus.SUCCEEDED,
        result={"total": 10},
    )
    return run


# -- the list -----------------------------------------------------------------------------


def test_changelist__shows_every_status_as_a_badge(admin_client, runs):
    response = admin_client.get(CHANGELIST)

    assert listed_ids(response) == {run.pk for run in runs.values()}
    content = response.content.decode()
    for status, run in runs.items():
        assert str(run.pk)[:8] in content
        assert f'class="pikku-badge pikku-status-{status}"' in content
    assert "pikku_workflows/admin.css" in content
    assert ADD not in content


def test_changelist__duration_and_progress(admin_client, run_with_history):
    started = timezone.now() - timedelta(minutes=3, seconds=5)
    WorkflowRun.objects.filter(pk=run_with_history.pk).update(
        created_at=started, finished_at=started + timedelta(seconds=90)
    )
    # An on-error handler is the engine's step, not one of the planned ones.
    WorkflowStepFactory(run=run_with_history, step_key="ship:onError", status=StepStatus.SUCCEEDED)
    refresh_list_fields(run_with_history.pk)  # as the write that ended its last pass does
    running = WorkflowRunFactory(workflow="slow", status=RunStatus.RUNNING)
    WorkflowRun.objects.filter(pk=running.pk).update(created_at=timezone.now() - timedelta(hours=2))

    content = admin_client.get(CHANGELIST).content.decode()

    assert "1 min 30 s" in content
    assert "2 h so far" in content
    # Two of the three planned steps succeeded, and the run completed: the body did without
    # the third, so the run reads as done, not as "2 / 3".
    assert "2 / 2" in content and "(1 skipped)" in content
    assert "2 / 3" not in content


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status__exact": "failed"}, {"failed"}),
        ({"status__exact": "running"}, {"running"}),
        ({"workflow": "order_fulfilment"}, {"running", "suspended", "failed"}),
        ({"workflow": "invoice", "status__exact": "completed"}, {"completed"}),
        ({"workflow": "invoice", "status__exact": "failed"}, set()),
    ],
)
def test_changelist__filters(admin_client, runs, query, expected):
    response = admin_client.get(CHANGELIST, query)

    assert listed_ids(response) == {runs[name].pk for name in expected}


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("abcd1234-0000-4000-8000-000000000001", {"completed"}),  # full id
        ("ABCD1234-0000-4000-8000-000000000001", {"completed"}),  # any case
        ("abcd12340000400080000000000000001", set()),  # 33 digits: not an id
        ("abcd1234000040008000000000000001", {"completed"}),  # hex without dashes
        ("abcd", {"completed", "failed"}),  # prefix shared by two runs
        ("abcd1234", {"completed"}),  # the short id the list shows
        ("abcd9999-00", {"failed"}),  # prefix with a dash
        ("  abcd9999 ", {"failed"}),
        ("abc", set()),  # too short to be read as an id prefix
        ("invoice", {"completed"}),  # workflow names still match
        ("refund", {"cancelled"}),
    ],
)
def test_changelist__search_by_id_or_workflow(admin_client, runs, term, expected):
    response = admin_client.get(CHANGELIST, {"q": term})

    assert listed_ids(response) == {runs[name].pk for name in expected}


def test_changelist__search_a_random_run_by_its_full_id_and_prefix(admin_client, runs):
    run = runs["running"]

    assert listed_ids(admin_client.get(CHANGELIST, {"q": str(run.pk)})) == {run.pk}
    assert run.pk in listed_ids(admin_client.get(CHANGELIST, {"q": str(run.pk)[:13]}))


# -- the run page ---------------------------------------------------------------------------


def test_change_page__shows_run_steps_and_attempt_history(admin_client, run_with_history):
    response = admin_client.get(change_url(run_with_history))

    assert response.status_code == 200
    content = response.content.decode()
    # Pretty JSON of the run's input and output, escaped inside <pre> (jsonb orders the keys).
    assert '<div class="readonly"><pre class="pikku-json">{\n  &quot;' in content
    assert "\n  &quot;order&quot;: 7" in content
    assert '<pre class="pikku-json">{\n  &quot;total&quot;: 10\n}</pre>' in content
    # The steps, read-only, with their result as JSON.
    steps = response.context["steps"]
    assert [(step["key"], step["function"], step["attempt"]) for step in steps] == [
        ("charge", "payments.charge", "2 / 6"),
        ("total", "Step function", "1 / 6"),  # no name recorded: its kind, in words
    ]
    assert '<pre class="pikku-json">{\n  &quot;charged&quot;: 5\n}</pre>' in content
    assert 'name="steps-0-step_key"' not in content
    # The attempt history: both attempts of charge and the single attempt of total.
    history = response.context["attempt_history"]
    assert [(row["step_key"], row["attempt"], row["dispatch"]) for row in history] == [
        ("charge", 1, "In place on a worker"),
        ("charge", 2, "Through the queue"),  # a retry goes through the queue
        ("total", 1, "-"),  # not recorded
    ]
    assert "<th>Dispatched</th>" in content
    assert "Attempt history" in content
    assert "gateway timeout" in content
    # The traceback folds away under its message.
    assert (
        '<details class="pikku-traceback"><summary>Traceback</summary>'
        '<pre class="pikku-json">Traceback: boom</pre></details>'
    ) in content
    assert 'class="pikku-badge pikku-status-failed"' in content
    # Nothing to submit.
    assert 'name="_save"' not in content


def test_change_page__without_steps_says_so(admin_client, runs):
    response = admin_client.get(change_url(runs["running"]))

    assert response.status_code == 200
    assert response.context["attempt_history"] == []
    assert "No attempts recorded yet." in response.content.decode()


def test_change_page__shows_the_subject_with_a_link(admin_client):
    order = Order.objects.create(customer="Ada", amount="5.00")
    run = WorkflowRunFactory(subject=order)

    content = admin_client.get(change_url(run)).content.decode()

    assert reverse("admin:demo_order_change", args=[order.pk]) in content
    assert str(order) in content


def test_change_page__query_count_does_not_grow_with_steps(admin_client):
    def run_with_steps(count: int) -> WorkflowRun:
        run = WorkflowRunFactory()
        for index in range(count):
            step = WorkflowStepFactory(run=run, step_key=f"s{index}", attempt=2, history=False)
            WorkflowStepHistoryFactory(step=step, attempt=1, status=StepStatus.FAILED)
            WorkflowStepHistoryFactory(step=step, attempt=2)
        return run

    def count_queries(run: WorkflowRun) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(change_url(run)).status_code == 200
        return len(queries)

    assert count_queries(run_with_steps(1)) == count_queries(run_with_steps(12))


# -- nothing is writable --------------------------------------------------------------------


def test_post_to_change_page__is_refused_and_changes_nothing(admin_client, viewer_client, runs):
    run = runs["running"]

    for client in (admin_client, viewer_client):
        response = client.post(change_url(run), {"workflow": "hacked", "status": "completed"})
        assert response.status_code == 403

    run.refresh_from_db()
    assert (run.workflow, run.status) == ("order_fulfilment", RunStatus.RUNNING)


def test_add_and_delete__are_forbidden(admin_client, runs):
    delete = reverse("admin:pikku_workflows_workflowrun_delete", args=[runs["failed"].pk])

    assert admin_client.get(ADD).status_code == 403
    assert admin_client.post(ADD, {"workflow": "new"}).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    bulk = admin_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": [runs["failed"].pk]}
    )
    # No delete action exists: "No action selected." and back to the list.
    assert bulk.status_code == 302
    assert "delete_selected" not in admin_client.get(CHANGELIST).content.decode()
    assert WorkflowRun.objects.filter(pk=runs["failed"].pk).exists()
    assert WorkflowRun.objects.count() == len(runs)


# -- permissions ----------------------------------------------------------------------------


def test_view_permission__opens_list_and_run_page_read_only(viewer_client, run_with_history):
    assert listed_ids(viewer_client.get(CHANGELIST)) == {run_with_history.pk}

    response = viewer_client.get(change_url(run_with_history))

    assert response.status_code == 200
    content = response.content.decode()
    # Steps are visible with the run permission alone (no step permission needed).
    assert "payments.charge" in content
    assert len(response.context["attempt_history"]) == 3
    assert 'name="_save"' not in content
    assert viewer_client.get(ADD).status_code == 403


def test_staff_without_view_permission__gets_403(outsider_client, runs):
    assert outsider_client.get(CHANGELIST).status_code == 403
    assert outsider_client.get(change_url(runs["running"])).status_code == 403


# -- runs on the host's own admin (the demo Order) ------------------------------------------


def test_order_admin__lists_the_runs_about_the_order(admin_client):
    order = Order.objects.create(customer="Ada", amount="5.00")
    other = Order.objects.create(customer="Grace", amount="7.00")
    mine = WorkflowRunFactory(workflow="order_fulfilment", status=RunStatus.FAILED, subject=order)
    theirs = WorkflowRunFactory(workflow="order_fulfilment", subject=other)

    response = admin_client.get(reverse("admin:demo_order_change", args=[order.pk]))

    assert response.status_code == 200
    content = response.content.decode()
    assert change_url(mine) in content
    assert str(mine.pk)[:8] in content
    assert 'class="pikku-badge pikku-status-failed"' in content
    assert change_url(theirs) not in content


def test_order_admin__saving_an_order_leaves_its_runs_alone(admin_client):
    order = Order.objects.create(customer="Ada", amount="5.00")
    run = WorkflowRunFactory(workflow="order_fulfilment", subject=order)
    prefix = "pikku_workflows-workflowrun-subject_type-subject_id"

    response = admin_client.post(
        reverse("admin:demo_order_change", args=[order.pk]),
        {
            "customer": "Ada L.",
            "amount": "6.00",
            f"{prefix}-TOTAL_FORMS": "1",
            f"{prefix}-INITIAL_FORMS": "1",
            f"{prefix}-MIN_NUM_FORMS": "0",
            f"{prefix}-MAX_NUM_FORMS": "0",
            f"{prefix}-0-id": str(run.pk),
            f"{prefix}-0-workflow": "hacked",
        },
    )

    assert response.status_code == 302, response.context and response.context.get("errors")
    order.refresh_from_db()
    run.refresh_from_db()
    assert order.customer == "Ada L."
    assert run.workflow == "order_fulfilment"


def test_order_admin__hides_runs_from_users_who_may_not_view_them(django_user_model):
    client = staff_client(django_user_model, "clerk", "view_order")
    order = Order.objects.create(customer="Ada", amount="5.00")
    run = WorkflowRunFactory(subject=order)

    response = client.get(reverse("admin:demo_order_change", args=[order.pk]))

    assert response.status_code == 200
    assert str(run.pk)[:8] not in response.content.decode()
