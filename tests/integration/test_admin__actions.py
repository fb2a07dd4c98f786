"""Operator actions in the admin: bulk actions on the list and buttons on the run page, each
with a confirmation page that sorts runs into eligible and not; the engine does the work and
writes the audit trail; refusals are reported, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.utils.html import strip_tags

import pikku_workflows as pw
from pikku_workflows.admin import OPERATIONS
from pikku_workflows.engine.operations import control
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun, WorkflowStep
from pikku_workflows.status import RunStatus, StepStatus
from tests.admin_support import (
    CHANGELIST,
    change_url,
    operation_url,
)
from tests.factories import WorkflowRunFactory, WorkflowStepFactory

pytestmark = pytest.mark.django_db


def status_of(run: WorkflowRun) -> str:
    return WorkflowRun.objects.values_list("status", flat=True).get(pk=run.pk)


def messages_of(response: Any) -> list[tuple[str, str]]:
    """(level, text) of the messages the request left; run ids are links in the HTML."""
    return [(m.level_tag, strip_tags(m.message)) for m in get_messages(response.wsgi_request)]


def bulk(client: Any, action: str, runs: list[WorkflowRun], **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [str(run.pk) for run in runs], **extra}
    return client.post(CHANGELIST, data)


def confirm_bulk(client: Any, action: str, runs: list[WorkflowRun], reason: str = "") -> Any:
    return bulk(client, action, runs, confirmed="yes", reason=reason)


# -- bulk actions on the list ---------------------------------------------------------------


def test_bulk_cancel__confirmation_page_sorts_runs_into_eligible_and_not(admin_client, shop):
    running = shop.start(sleep="1h")
    suspended = shop.start(review=True)
    completed = shop.start()
    cancelled = WorkflowRunFactory(status=RunStatus.CANCELLED)

    response = bulk(
        admin_client, "cancel_runs", [running, suspended, completed, cancelled], index="0"
    )

    assert response.status_code == 200
    assert response.templates[0].name.endswith("confirm_operation.html")
    eligible = {row["run"].pk for row in response.context["eligible"]}
    ineligible = {row["run"].pk: row["problem"] for row in response.context["ineligible"]}
    assert eligible == {running.pk, suspended.pk}
    assert ineligible == {
        completed.pk: "completed: only queued, running or suspended runs can be cancelled",
        cancelled.pk: "already cancelled",
    }
    content = response.content.decode()
    assert "2 runs will be cancelled" in content
    assert "2 runs will be skipped" in content
    assert 'name="reason"' in content
    assert 'value="Yes, cancel 2 runs"' in content
    # Asking changes nothing.
    assert status_of(running) == RunStatus.RUNNING
    assert not WorkflowAuditEntry.objects.exists()


def test_bulk_cancel__confirmed_cancels_the_eligible_and_reports_the_rest(
    admin_client, admin_user, shop
):
    running = shop.start(sleep="1h")
    suspended = shop.start(review=True)
    completed = shop.start()

    response = confirm_bulk(
        admin_client, "cancel_runs", [running, suspended, completed], reason="customer left"
    )

    assert response.status_code == 302
    assert response["Location"] == CHANGELIST
    assert status_of(running) == status_of(suspended) == RunStatus.CANCELLED
    assert status_of(completed) == RunStatus.COMPLETED
    audit = WorkflowAuditEntry.objects.filter(action="cancel").order_by("id")
    assert {(e.run_id, e.user, e.reason) for e in audit} == {
        (running.pk, admin_user, "customer left"),
        (suspended.pk, admin_user, "customer left"),
    }
    reported = messages_of(response)
    assert reported[0][0] == "success"
    assert reported[0][1].startswith("Cancelled 2 runs: ")
    assert reported[1][0] == "warning"
    assert "Skipped 1 run that could not be cancelled" in reported[1][1]
    assert str(completed.pk)[:8] in reported[1][1]
    assert "only queued, running or suspended runs can be cancelled" in reported[1][1]


def test_bulk_suspend_and_resume(admin_client, shop):
    runs = [shop.start(sleep="1h"), shop.start(sleep="1h")]

    confirm_bulk(admin_client, "suspend_runs", runs, reason="maintenance")

    assert [status_of(run) for run in runs] == [RunStatus.SUSPENDED] * 2
    reasons = WorkflowRun.objects.filter(pk__in=[r.pk for r in runs]).values_list(
        "error__message", flat=True
    )
    assert set(reasons) == {"maintenance"}

    response = confirm_bulk(admin_client, "resume_runs", runs, reason="done")

    assert [status_of(run) for run in runs] == [RunStatus.RUNNING] * 2
    level, text = messages_of(response)[-1]  # the suspend's message was never shown: first
    assert (level, text[: len("Resumed 2 runs: ")]) == ("success", "Resumed 2 runs: ")
    assert all(str(run.pk)[:8] in text for run in runs)
    actions = list(WorkflowAuditEntry.objects.order_by("id").values_list("action", "reason"))
    assert actions == [("suspend", "maintenance")] * 2 + [("resume", "done")] * 2


def test_bulk_retry__failed_runs_run_again(admin_client, shop, django_capture_on_commit_callbacks):
    failed = [shop.failed(), shop.failed()]
    completed = shop.start()

    with django_capture_on_commit_callbacks(execute=True):
        response = confirm_bulk(admin_client, "retry_runs", [*failed, completed])

    assert [status_of(run) for run in failed] == [RunStatus.RUNNING] * 2
    retried = WorkflowStep.objects.get(run=failed[0], step_key="charge")
    assert (retried.status, retried.attempt) == (StepStatus.PENDING, 2)
    levels = [level for level, _ in messages_of(response)]
    assert levels == ["success", "warning"]
    assert "completed: only failed runs can be retried" in messages_of(response)[1][1]


def test_bulk_action__nothing_eligible_offers_no_submit_button(admin_client, shop):
    completed = shop.start()

    response = bulk(admin_client, "cancel_runs", [completed], index="0")

    content = response.content.decode()
    assert response.context["eligible"] == []
    assert "None of the selected runs can be cancelled." in content
    assert 'value="Yes, cancel' not in content


def test_bulk_action__engine_refusal_is_reported_per_run_not_a_500(admin_client, shop, monkeypatch):
    first, second = shop.start(sleep="1h"), shop.start(sleep="1h")
    real_move_run = control.move_run

    def move_all_but_first(run_id: Any, *args: Any, **kwargs: Any) -> Any:
        if run_id == first.pk:
            # As if someone else moved the run between the confirmation and the engine's write.
            raise pw.InvalidTransition("run", "completed", "cancelled")
        return real_move_run(run_id, *args, **kwargs)

    monkeypatch.setattr(control, "move_run", move_all_but_first)

    response = confirm_bulk(admin_client, "cancel_runs", [first, second])

    assert response.status_code == 302
    assert status_of(first) == RunStatus.RUNNING
    assert status_of(second) == RunStatus.CANCELLED
    reported = messages_of(response)
    assert reported[0] == ("success", f"Cancelled 1 run: {str(second.pk)[:8]}.")
    assert reported[1][0] == "error"
    assert reported[1][1].startswith(f"Could not cancel run {str(first.pk)[:8]}: ")
    assert "[INVALID_TRANSITION]" in reported[1][1]


def test_bulk_action__run_changed_since_confirmation_is_skipped(admin_client, shop):
    run = shop.start(sleep="1h")
    page = bulk(admin_client, "suspend_runs", [run], index="0")
    assert [row["run"].pk for row in page.context["eligible"]] == [run.pk]
    pw.cancel_run(run.pk, reason="meanwhile")

    response = confirm_bulk(admin_client, "suspend_runs", [run])

    assert status_of(run) == RunStatus.CANCELLED
    [(level, text)] = messages_of(response)
    assert level == "warning"
    assert "cancelled: only queued or running runs can be suspended" in text


def test_fork_is_not_a_bulk_action(admin_client, shop):
    response = admin_client.get(CHANGELIST)

    actions = [name for name, _ in response.context["action_form"].fields["action"].choices]
    assert "fork_run" not in actions and "fork_runs" not in actions
    assert actions[:5] == ["", "cancel_runs", "suspend_runs", "resume_runs", "retry_runs"]


# -- buttons on the run page ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "buttons"),
    [
        ("running", ["cancel", "suspend"]),
        ("suspended", ["cancel", "resume"]),
        ("failed", ["retry", "fork"]),
        ("completed", ["fork"]),
    ],
)
def test_run_page__shows_the_operations_that_apply(admin_client, shop, state, buttons):
    run = {
        "running": lambda: shop.start(sleep="1h"),
        "suspended": lambda: shop.start(review=True),
        "failed": shop.failed,
        "completed": shop.start,
    }[state]()

    response = admin_client.get(change_url(run))

    assert [op["name"] for op in response.context["run_operations"]] == buttons
    content = response.content.decode()
    for name in buttons:
        assert f'href="{operation_url(run, name)}"' in content


def test_single_retry__confirm_then_the_run_runs_again_to_completion(
    admin_client, admin_user, shop, django_capture_on_commit_callbacks
):
    from tests.queue import drain_queue

    run = shop.failed()
    page = admin_client.get(operation_url(run, "retry"))
    assert page.status_code == 200
    assert [row["run"].pk for row in page.context["eligible"]] == [run.pk]
    assert "1 run will be retried" in page.content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(operation_url(run, "retry"), {"reason": "gateway is back"})
    assert response.status_code == 302
    assert response["Location"] == change_url(run)
    assert messages_of(response) == [("success", f"Retried 1 run: {str(run.pk)[:8]}.")]
    drain_queue()

    assert status_of(run) == RunStatus.COMPLETED
    entry = WorkflowAuditEntry.objects.get(run=run)
    assert (entry.action, entry.user, entry.reason) == ("retry", admin_user, "gateway is back")
    page = admin_client.get(change_url(run)).content.decode()
    assert "gateway is back" in page
    assert "Audit trail" in page


def test_single_cancel__of_a_completed_run_explains_and_changes_nothing(admin_client, shop):
    run = shop.start()

    page = admin_client.get(operation_url(run, "cancel"))
    response = admin_client.post(operation_url(run, "cancel"), {"reason": "oops"})

    assert page.context["ineligible"][0]["problem"].startswith("completed: ")
    assert response.status_code == 302
    assert status_of(run) == RunStatus.COMPLETED
    [(level, text)] = messages_of(response)
    assert level == "warning"
    assert "completed: only queued, running or suspended runs can be cancelled" in text


def test_single_cancel__twice_is_quiet_the_second_time(admin_client, shop):
    run = shop.start(sleep="1h")

    admin_client.post(operation_url(run, "cancel"), {"reason": "first"})
    second = admin_client.post(operation_url(run, "cancel"), {"reason": "second"})

    assert status_of(run) == RunStatus.CANCELLED
    assert WorkflowAuditEntry.objects.filter(run=run).count() == 1
    assert messages_of(second)[-1] == (
        "warning",
        f"Skipped 1 run that could not be cancelled: {str(run.pk)[:8]} (already cancelled).",
    )


def test_fork__picks_from_step_among_the_runs_steps(admin_client, admin_user, shop):
    run = shop.failed()

    page = admin_client.get(operation_url(run, "fork") + "?from_step=charge")

    assert page.status_code == 200
    field = page.context["form"].fields["from_step"]
    assert [key for key, _ in field.choices] == ["reserve", "charge"]
    assert page.context["form"]["from_step"].value() == "charge"
    assert '<option value="charge" selected>' in page.content.decode()

    shop.broken = False
    response = admin_client.post(
        operation_url(run, "fork"), {"from_step": "charge", "reason": "fixed the gateway"}
    )

    fork = WorkflowRun.objects.get(forked_from=run)
    assert response.status_code == 302
    assert response["Location"] == change_url(fork)
    assert messages_of(response)[0][1] == f"Forked run {str(run.pk)[:8]} as run {str(fork.pk)[:8]}."
    assert list(fork.steps.values_list("step_key", "copied")) == [("reserve", True)]
    entry = WorkflowAuditEntry.objects.get(run=run, action="fork")
    assert (entry.user, entry.payload["new_run_id"]) == (admin_user, str(fork.pk))
    # The source links to its fork and the fork back to its source.
    assert change_url(fork) in admin_client.get(change_url(run)).content.decode()
    assert change_url(run) in admin_client.get(change_url(fork)).content.decode()


def test_fork__a_step_the_run_does_not_have_is_a_form_error(admin_client, shop):
    run = shop.start()

    response = admin_client.post(operation_url(run, "fork"), {"from_step": "nope"})

    assert response.status_code == 200
    assert "from_step" in response.context["form"].errors
    assert not WorkflowRun.objects.filter(forked_from=run).exists()


def test_run_page__steps_link_to_a_fork_from_each_step(admin_client, shop):
    run = shop.start()

    content = admin_client.get(change_url(run)).content.decode()

    assert f'href="{operation_url(run, "fork")}?from_step=charge"' in content


def test_unknown_operation_or_run__404(admin_client, shop):
    run = shop.start()

    assert admin_client.get(operation_url(run, "delete")).status_code == 404
    missing = "00000000-0000-4000-8000-000000000000"
    assert admin_client.get(operation_url(missing, "cancel")).status_code == 404


# -- the admin's eligibility preview agrees with the engine ---------------------------------


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("status", list(RunStatus))
def test_eligibility_preview__matches_what_the_engine_does(shop, operation, status):
    run = WorkflowRunFactory(workflow="admin_tests.order", status=status)
    WorkflowStepFactory(run=run, step_key="only", status=StepStatus.SUCCEEDED)
    function = getattr(pw, f"{operation}_run")
    options = {"from_step": "only"} if operation == "fork" else {}

    problem = OPERATIONS[operation].ineligibility(status)
    try:
        function(run.pk, **options)
    except pw.InvalidTransition:
        outcome = "refused"
    else:
        audited = WorkflowAuditEntry.objects.filter(run=run, action=operation).exists()
        outcome = "done" if audited else "quiet"

    if problem is None:
        assert outcome == "done"
    elif problem.startswith("already "):
        assert outcome == "quiet"
    else:
        assert outcome == "refused"
