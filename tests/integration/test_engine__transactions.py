"""Starting runs inside an open `transaction.atomic()` (ATOMIC_REQUESTS, TestCase): the run lives
in that transaction, vanishes with a rollback, and queued work is enqueued only after commit."""

from __future__ import annotations

import pytest
from django.db import transaction
from django_q.models import OrmQ

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowRun, WorkflowStep, WorkflowStepHistory
from pikku_workflows.status import RunStatus

pytestmark = pytest.mark.postgres

transactional = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


@transactional
def test_atomic__inline_run_rolled_back_with_the_outer_transaction_leaves_no_run():
    @pw.workflow("atomic.inline")
    def inline(wf, input):
        return wf.do("step", lambda: "done")

    with pytest.raises(Rollback), transaction.atomic():
        run_id = pw.start_workflow("atomic.inline", {}, inline=True)
        assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.COMPLETED
        raise Rollback

    assert not WorkflowRun.objects.filter(pk=run_id).exists()
    assert not WorkflowStep.objects.exists()
    assert not WorkflowStepHistory.objects.exists()


@transactional
def test_atomic__inline_run_committed_with_the_outer_transaction_is_kept():
    @pw.workflow("atomic.inline_kept")
    def inline_kept(wf, input):
        return wf.do("step", lambda: "done")

    with transaction.atomic():
        run_id = pw.start_workflow("atomic.inline_kept", {}, inline=True)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output, run.lease_holder) == (RunStatus.COMPLETED, "done", None)


@transactional
def test_atomic__queued_start_enqueues_nothing_until_commit():
    @pw.workflow("atomic.queued")
    def queued(wf, input):
        return None

    before = OrmQ.objects.count()

    with transaction.atomic():
        run_id = pw.start_workflow("atomic.queued", {})
        assert OrmQ.objects.count() == before

    assert OrmQ.objects.count() == before + 1
    assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.RUNNING


@transactional
def test_atomic__queued_start_rolled_back_enqueues_nothing():
    @pw.workflow("atomic.queued_rolled_back")
    def queued_rolled_back(wf, input):
        return None

    before = OrmQ.objects.count()

    with pytest.raises(Rollback), transaction.atomic():
        run_id = pw.start_workflow("atomic.queued_rolled_back", {})
        raise Rollback

    assert OrmQ.objects.count() == before
    assert not WorkflowRun.objects.filter(pk=run_id).exists()


@transactional
def test_atomic__queued_start_outside_a_transaction_enqueues_at_once():
    @pw.workflow("atomic.queued_now")
    def queued_now(wf, input):
        return None

    before = OrmQ.objects.count()

    pw.start_workflow("atomic.queued_now", {})

    assert OrmQ.objects.count() == before + 1


@transactional
def test_atomic__resume_inside_a_transaction_enqueues_after_commit():
    @pw.workflow("atomic.resumed")
    def resumed(wf, input):
        wf.suspend("hold")
        return "through"

    run_id = pw.start_workflow("atomic.resumed", {}, inline=True)
    before = OrmQ.objects.count()

    with transaction.atomic():
        pw.resume_run(run_id)
        assert OrmQ.objects.count() == before

    assert OrmQ.objects.count() == before + 1


@pytest.mark.django_db
def test_atomic__inline_run_inside_a_test_transaction_runs_to_the_end(
    django_capture_on_commit_callbacks,
):
    calls = []

    @pw.workflow("atomic.in_test_transaction")
    def in_test_transaction(wf, input):
        calls.append(wf.do("first", lambda: 1))
        wf.suspend("hold")
        return wf.do("second", lambda: 2)

    with django_capture_on_commit_callbacks() as callbacks:
        run_id = pw.start_workflow("atomic.in_test_transaction", {}, inline=True)
        assert WorkflowRun.objects.get(pk=run_id).status == RunStatus.SUSPENDED
        pw.resume_run(run_id)

    # The resume's pass is enqueued on commit only (the test transaction never commits); the
    # other callbacks announce the start and the resume (pikku_workflows.events).
    enqueues = [c for c in callbacks if c.__qualname__.startswith("enqueue_orchestration")]
    assert len(enqueues) == 1
    assert len(callbacks) == 3
    assert OrmQ.objects.count() == 0
    orchestrate(run_id)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, 2)
    assert calls == [1, 1]


@pytest.mark.django_db
def test_atomic__inline_child_run_inside_a_test_transaction():
    @pw.workflow("atomic.child")
    def child(wf, input):
        return wf.do("inner", lambda: input["n"] + 1)

    @pw.workflow("atomic.parent")
    def parent(wf, input):
        return wf.do("child", "atomic.child", {"n": 1})

    run_id = pw.start_workflow("atomic.parent", {}, inline=True)

    assert WorkflowRun.objects.get(pk=run_id).output == 2
    assert OrmQ.objects.count() == 0


@transactional
def test_atomic__step_function_hitting_a_database_error_fails_only_its_attempt():
    from django.contrib.auth import get_user_model

    User = get_user_model()
    User.objects.create_user("taken")

    @pw.step_function("atomic.duplicate_user")
    def duplicate_user(data, ctx):
        User.objects.create_user("taken")  # unique violation

    @pw.workflow("atomic.database_error")
    def database_error(wf, input):
        try:
            wf.do("create", "atomic.duplicate_user", retries=1, retry_delay=0)
        except pw.StepFailed:
            return "handled"
        return "created"

    with transaction.atomic():
        run_id = pw.start_workflow("atomic.database_error", {}, inline=True)
        run = WorkflowRun.objects.get(pk=run_id)
        assert (run.status, run.output) == (RunStatus.COMPLETED, "handled")

    assert WorkflowStepHistory.objects.filter(step__run_id=run_id).count() == 2


@pytest.mark.django_db
def test_atomic__step_database_error_inside_a_test_transaction_is_recorded():
    from django.contrib.auth import get_user_model

    User = get_user_model()

    @pw.step_function("atomic.creates_then_fails")
    def creates_then_fails(data, ctx):
        User.objects.create_user(f"attempt-{ctx.attempt}")
        User.objects.create_user(f"attempt-{ctx.attempt}")  # unique violation

    @pw.workflow("atomic.database_error_in_test")
    def database_error_in_test(wf, input):
        wf.do("create", "atomic.creates_then_fails", retries=0)

    run_id = pw.start_workflow("atomic.database_error_in_test", {}, inline=True)

    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.status, run.error["code"]) == (RunStatus.FAILED, "STEP_FAILED")
    assert run.error["type"] == "django.db.utils.IntegrityError"
    # The failed attempt's own writes rolled back with it.
    assert not User.objects.filter(username="attempt-1").exists()
