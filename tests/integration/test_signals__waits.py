"""External signals: `pw.send_signal` and `wf.wait_for_signal`. A signal sent before the wait is
kept and taken at once; one sent to a waiting run is delivered and its pass enqueued; two of one
name are taken in order by the waits for that name, each once; a timeout raises `SignalTimeout`
in the body, which may catch it; ended and unknown runs refuse signals; every signal is audited."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.operations.timers import fire_due_timers
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowAuditEntry, WorkflowRun, WorkflowSignal, WorkflowStep
from pikku_workflows.registry import registry
from pikku_workflows.status import RunStatus, StepKind, StepStatus
from tests.approvals import finished, person
from tests.faults import database_now
from tests.queue import queued_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def payment_flow() -> str:
    """Waits for `payment.settled` twice (two reaches of one key), then for `shipped`."""

    @pw.workflow("signals.payments")
    def payments(wf, input):
        first = wf.wait_for_signal("paid", "payment.settled")
        second = wf.wait_for_signal("paid", "payment.settled")
        shipped = wf.wait_for_signal("shipped", "shipped", timeout=input.get("timeout"))
        return {"first": first, "second": second, "shipped": shipped}

    return "signals.payments"


def start_queued(name: str, **input) -> str:
    """A run whose first pass has not run yet (no worker took its message)."""
    return pw.start_workflow(name, input)


def wait_step(run_id, key: str) -> WorkflowStep:
    return WorkflowStep.objects.get(run_id=run_id, step_key=key)


def test_signal__after_the_wait_is_delivered_and_the_run_goes_on(payment_flow):
    run_id = pw.start_workflow(payment_flow, {}, inline=True)
    assert pw.get_run_status(run_id)["waiting_on"] == {
        "step_key": "paid",
        "kind": "signal",
        "signal": "payment.settled",
    }
    step = wait_step(run_id, "paid")
    assert (step.kind, step.status) == (StepKind.SIGNAL, StepStatus.WAITING)

    summary = pw.send_signal(run_id, "payment.settled", {"amount": 12})

    assert summary["waiting_on"] == {"kind": "pass"}  # the step has its payload; a pass is queued
    assert queued_tasks() == [("pikku_workflows.tasks.orchestrate", (run_id,))]
    signal = WorkflowSignal.objects.get()
    assert (signal.consumed_by_step_id, signal.consumed_at is not None) == (step.pk, True)
    finished(run_id)
    assert pw.get_run_status(run_id)["waiting_on"]["step_key"] == "paid#1"


def test_signals__sent_before_the_wait_are_kept_and_taken_in_order(payment_flow):
    run_id = start_queued(payment_flow)
    pw.send_signal(run_id, "payment.settled", {"n": 1})
    pw.send_signal(run_id, "payment.settled", {"n": 2})
    pw.send_signal(run_id, "payment.settled", {"n": 3})
    pw.send_signal(run_id, "shipped", "TRK-1")

    run = finished(run_id)

    assert run.status == RunStatus.COMPLETED
    assert run.output == {"first": {"n": 1}, "second": {"n": 2}, "shipped": "TRK-1"}
    taken = WorkflowSignal.objects.order_by("id").values_list(
        "payload", "consumed_by_step__step_key"
    )
    # Oldest first, each once; the third payment.settled is kept: nothing waited for it.
    assert list(taken) == [
        ({"n": 1}, "paid"),
        ({"n": 2}, "paid#1"),
        ({"n": 3}, None),
        ("TRK-1", "shipped"),
    ]


def test_signal__every_one_is_audited_with_who_sent_it(payment_flow):
    sender = person("gateway", decide=False, perms=("signal_workflowrun",))
    run_id = start_queued(payment_flow)

    pw.send_signal(run_id, "payment.settled", {"n": 1}, by=sender)
    pw.send_signal(run_id, "unrelated")

    entries = list(WorkflowAuditEntry.objects.filter(run_id=run_id, action="signal"))
    assert [(e.user, e.payload["signal"], e.payload["taken_by_step"]) for e in entries] == [
        (sender, "payment.settled", None),
        (None, "unrelated", None),
    ]
    timeline = [event for event in pw.get_run_timeline(run_id) if event["event"] == "signal"]
    assert [event["user"] for event in timeline] == ["gateway", None]


def test_signal__by_someone_neither_the_starter_nor_a_holder_of_the_permission_is_refused(
    payment_flow,
):
    starter = person("starter", decide=False)
    run_id = pw.start_workflow(payment_flow, {}, started_by=starter)
    reader = person("reader", decide=False, perms=("view_workflowrun",))
    retired = person("retired", decide=False, perms=("signal_workflowrun",))
    type(retired).objects.filter(pk=retired.pk).update(is_active=False)
    retired.is_active = False

    for refused in (reader, retired):
        with pytest.raises(pw.SignalForbidden) as caught:
            pw.send_signal(run_id, "payment.settled", {"n": 1}, by=refused)
        assert caught.value.code == "SIGNAL_FORBIDDEN"
        assert "signal_workflowrun" in caught.value.message

    assert not WorkflowSignal.objects.exists()
    denials = WorkflowAuditEntry.objects.filter(run_id=run_id).order_by("id")
    assert [(e.action, e.user, e.payload) for e in denials] == [
        ("deny", refused, {"operation": "signal", "signal": "payment.settled"})
        for refused in (reader, retired)
    ]
    # Its starter needs no permission; code that names nobody is not checked.
    pw.send_signal(run_id, "payment.settled", {"n": 1}, by=starter)
    pw.send_signal(run_id, "payment.settled", {"n": 2})
    assert WorkflowSignal.objects.filter(run_id=run_id).count() == 2


def test_signal__a_refusal_on_an_unknown_run_is_run_not_found():
    with pytest.raises(pw.RunNotFound):
        pw.send_signal(
            "00000000-0000-0000-0000-000000000000", "x", by=person("reader", decide=False)
        )


def test_timeout__raises_signal_timeout_in_the_body_which_may_catch_it():
    @pw.workflow("signals.patient")
    def patient(wf, input):
        try:
            return wf.wait_for_signal("callback", "webhook", timeout="1h")
        except pw.SignalTimeout as exc:
            return {"gave_up": exc.code, "signal": exc.signal}

    run_id = pw.start_workflow("signals.patient", {}, inline=True)
    step = wait_step(run_id, "callback")
    waiting = pw.get_run_status(run_id)["waiting_on"]
    assert waiting["until"] == step.wake_at.isoformat()
    WorkflowStep.objects.filter(pk=step.pk).update(wake_at=database_now())

    assert fire_due_timers() == 1

    assert finished(run_id).output == {"gave_up": "SIGNAL_TIMEOUT", "signal": "webhook"}
    step.refresh_from_db()
    assert (step.status, step.error["code"]) == (StepStatus.FAILED, "SIGNAL_TIMEOUT")


def test_timeout__uncaught_fails_the_run_and_a_late_signal_is_kept_not_delivered(payment_flow):
    run_id = start_queued(payment_flow, timeout=0)
    pw.send_signal(run_id, "payment.settled", 1)
    pw.send_signal(run_id, "payment.settled", 2)
    finished(run_id)  # parks on "shipped", whose timeout is already due

    fire_due_timers()
    run = finished(run_id)
    pw_error = run.error
    with pytest.raises(pw.InvalidTransition):
        pw.send_signal(run_id, "shipped", "too late")

    assert (run.status, pw_error["code"]) == (RunStatus.FAILED, "SIGNAL_TIMEOUT")
    assert WorkflowSignal.objects.filter(name="shipped").count() == 0


def test_timeout__a_signal_first_wins_and_the_timer_changes_nothing(payment_flow):
    run_id = start_queued(payment_flow, timeout="1h")
    pw.send_signal(run_id, "payment.settled", 1)
    pw.send_signal(run_id, "payment.settled", 2)
    finished(run_id)
    step = wait_step(run_id, "shipped")
    due = database_now()
    pw.send_signal(run_id, "shipped", "TRK-2")
    WorkflowStep.objects.filter(pk=step.pk).update(wake_at=due)  # a timer armed by mistake

    assert fire_due_timers() == 0

    assert finished(run_id).output["shipped"] == "TRK-2"


def test_signal__to_an_ended_or_unknown_run_is_refused_and_writes_nothing(payment_flow):
    run_id = start_queued(payment_flow)
    pw.cancel_run(run_id)

    with pytest.raises(pw.InvalidTransition, match="cancelled: it takes no more signals") as caught:
        pw.send_signal(run_id, "payment.settled", 1)
    assert caught.value.code == "INVALID_TRANSITION"
    with pytest.raises(pw.RunNotFound):
        pw.send_signal("00000000-0000-0000-0000-000000000000", "payment.settled")
    with pytest.raises(pw.RunNotFound):
        pw.send_signal("not a run id", "payment.settled")
    assert not WorkflowSignal.objects.exists()
    assert not WorkflowAuditEntry.objects.filter(action="signal").exists()


def test_signal__bad_arguments_are_invalid_input(payment_flow):
    run_id = start_queued(payment_flow)

    for name, payload in (("", None), ("x" * 201, None), ("ok", float("nan")), (7, None)):
        with pytest.raises(pw.InvalidInput):
            pw.send_signal(run_id, name, payload)
    with pytest.raises(pw.InvalidInput):
        pw.send_signal(run_id, "ok", by="alice")
    assert not WorkflowSignal.objects.exists()


def test_signal__to_a_suspended_run_is_delivered_and_used_once_it_resumes(payment_flow):
    run_id = pw.start_workflow(payment_flow, {}, inline=True)
    pw.suspend_run(run_id)

    pw.send_signal(run_id, "payment.settled", "while suspended")

    assert finished(run_id).status == RunStatus.SUSPENDED
    assert wait_step(run_id, "paid").status == StepStatus.SUCCEEDED
    pw.resume_run(run_id)
    finished(run_id)
    assert wait_step(run_id, "paid").result == "while suspended"
    assert wait_step(run_id, "paid#1").status == StepStatus.WAITING


def test_replay__waiting_for_another_signal_at_the_key_is_not_deterministic(payment_flow):
    run_id = pw.start_workflow(payment_flow, {}, inline=True)

    def changed(wf, input):
        return wf.wait_for_signal("paid", "payment.refunded")

    registry.workflows.pop(payment_flow)
    pw.workflow(payment_flow)(changed)
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "NON_DETERMINISTIC")


def test_retry__after_a_timeout_waits_again_with_a_new_timer():
    @pw.workflow("signals.once")
    def once(wf, input):
        return wf.wait_for_signal("ack", "ack", timeout="1h")

    run_id = pw.start_workflow("signals.once", {}, inline=True)
    WorkflowStep.objects.filter(run_id=run_id).update(wake_at=database_now())
    fire_due_timers()
    assert finished(run_id).status == RunStatus.FAILED

    pw.retry_run(run_id)
    finished(run_id)
    step = wait_step(run_id, "ack")
    assert (step.status, step.attempt) == (StepStatus.WAITING, 2)
    assert (step.wake_at - database_now()).total_seconds() > 3500
    pw.send_signal(run_id, "ack", "finally")
    assert finished(run_id).output == "finally"
