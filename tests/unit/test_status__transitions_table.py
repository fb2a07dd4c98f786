from __future__ import annotations

from pikku_workflows.status import (
    RUN_TRANSITIONS,
    TERMINAL_RUN_STATUSES,
    RunStatus,
    StepStatus,
    run_can_move,
    run_sources,
    step_can_move,
)


def test_run_transitions__terminal_statuses_are_final_except_failed_retry():
    assert RUN_TRANSITIONS[RunStatus.COMPLETED] == frozenset()
    assert RUN_TRANSITIONS[RunStatus.CANCELLED] == frozenset()
    assert RUN_TRANSITIONS[RunStatus.CONTINUED] == frozenset()
    assert RUN_TRANSITIONS[RunStatus.FAILED] == {RunStatus.RUNNING}
    terminal = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CONTINUED}
    assert terminal == TERMINAL_RUN_STATUSES


def test_run_transitions__only_a_running_run_continues():
    assert run_sources(RunStatus.CONTINUED) == {RunStatus.RUNNING}


def test_run_transitions__suspended_resumes_or_cancels_only():
    assert run_can_move(RunStatus.SUSPENDED, RunStatus.RUNNING)
    assert run_can_move(RunStatus.SUSPENDED, RunStatus.CANCELLED)
    assert not run_can_move(RunStatus.SUSPENDED, RunStatus.COMPLETED)


def test_run_sources__of_cancelled():
    assert run_sources(RunStatus.CANCELLED) == {
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.SUSPENDED,
    }


def test_run_transitions__a_queued_run_is_admitted_or_stopped_and_resumes_into_the_queue():
    assert RUN_TRANSITIONS[RunStatus.QUEUED] == {
        RunStatus.RUNNING,
        RunStatus.SUSPENDED,
        RunStatus.CANCELLED,
    }
    assert run_sources(RunStatus.QUEUED) == {RunStatus.SUSPENDED}


def test_step_transitions__succeeded_is_final():
    for target in StepStatus.values:
        assert not step_can_move(StepStatus.SUCCEEDED, target)


def test_step_transitions__scheduled_goes_back_to_pending_only_undispatched():
    # A worker without the step function hands the step back: no attempt was spent.
    assert step_can_move(StepStatus.SCHEDULED, StepStatus.PENDING)
    assert step_can_move(StepStatus.PENDING, StepStatus.SCHEDULED)
    assert not step_can_move(StepStatus.RUNNING, StepStatus.PENDING)
