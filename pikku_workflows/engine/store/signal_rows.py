"""Signals in the tables: each one sent is kept (`WorkflowSignal`) until a wait for its name
takes it, oldest first, each once; and waits whose timeout passed.

Deliveries happen under the run's row lock (`claims.lock_run_for_signals_txn`, or the pass's own
`lock_running_run_txn` when it creates the wait), so a signal sent while its wait is being
created is delivered by whichever commits second. A wait's guarded move decides between a
signal and its timeout: the loser finds the step settled and changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...exceptions import SignalTimeout
from ...models import WorkflowSignal, WorkflowStep
from ...querysets import DatabaseNow
from ...serialization import describe_error
from ...status import StepStatus
from .step_transitions import HandedOver, move_step_txn
from .step_transitions import hand_over_signal_txn as step_hand_over_signal_txn
from .transitions import on_postgresql


def keep_signal_txn(run_id: Any, name: str, payload: Any, by: Any) -> WorkflowSignal:
    assert transaction.get_connection().in_atomic_block
    return WorkflowSignal.objects.create(run_id=run_id, name=name, payload=payload, sent_by=by)


def kept_signal_count_txn(run_id: Any) -> int:
    """Inside the run's lock: how many of its signals no wait has taken yet."""
    assert transaction.get_connection().in_atomic_block
    return WorkflowSignal.objects.filter(run_id=run_id, consumed_at__isnull=True).count()


def deliver_signals_txn(run_id: Any) -> list[tuple[WorkflowSignal, WorkflowStep]]:
    """Inside the run's lock: hand the run's kept signals to its waits, per name oldest signal to
    oldest wait; returns the (signal, step) pairs delivered."""
    assert transaction.get_connection().in_atomic_block
    waits = list(
        WorkflowStep.objects.awaiting_signal()
        .filter(run_id=run_id)
        .order_by("created_at", "step_key")
    )
    delivered = []
    for name in dict.fromkeys(wait_name(wait) for wait in waits):
        kept = WorkflowSignal.objects.filter(
            run_id=run_id, name=name, consumed_at__isnull=True
        ).order_by("id")
        waiting = [wait for wait in waits if wait_name(wait) == name]
        for signal in kept[: len(waiting)]:
            step = _first_taker(waiting, signal)
            if step is None:
                break
            delivered.append((signal, step))
    return delivered


def hand_over_signal_txn(run_id: Any, name: str) -> HandedOver | None:
    """Inside the run's lock, once a signal `name` is kept: the oldest kept signal of that name
    handed to the oldest wait for it (None when either is missing). Each transaction that keeps
    a signal or parks a wait hands over what it can, so no other name has a pair waiting: one
    statement on PostgreSQL (`step_transitions.hand_over_signal_txn`), elsewhere
    `deliver_signals_txn`."""
    assert transaction.get_connection().in_atomic_block
    if on_postgresql():
        return step_hand_over_signal_txn(run_id, name)
    for signal, step in deliver_signals_txn(run_id):
        ended_at = getattr(step, "ended_at", None)  # noted by the move (note_attempt_end)
        return HandedOver(signal.pk, step.pk, step.step_key, step.attempt, ended_at)
    return None


def _first_taker(waiting: list[WorkflowStep], signal: WorkflowSignal) -> WorkflowStep | None:
    """The oldest wait that takes `signal` (a wait that timed out meanwhile refuses it)."""
    while waiting:
        step = waiting.pop(0)
        moved = move_step_txn(
            step,
            StepStatus.SUCCEEDED,
            expected=[StepStatus.WAITING],
            result=signal.payload,
            wake_at=None,
        )
        if moved:
            WorkflowSignal.objects.filter(pk=signal.pk, consumed_at__isnull=True).update(
                consumed_by_step=step, consumed_at=DatabaseNow()
            )
            return step
    return None


def wait_name(step: WorkflowStep) -> str:
    return str((step.data or {}).get("signal", ""))


def time_out_wait_txn(step: WorkflowStep) -> bool:
    """Inside the timer loop's transaction, which holds the due wait: it fails with
    SIGNAL_TIMEOUT (its only attempt: `wf.wait_for_signal` raises `SignalTimeout`). False when a
    signal settled it first."""
    name = wait_name(step)
    timeout_ms = (step.data or {}).get("timeout_ms")
    timeout = f" within {timeout_ms} ms" if timeout_ms is not None else ""
    why = SignalTimeout(
        f"No signal {name!r} arrived{timeout} (step {step.step_key!r}).",
        step_key=step.step_key,
        signal=name,
    )
    return move_step_txn(
        step,
        StepStatus.FAILED,
        expected=[StepStatus.WAITING],
        error=describe_error(why, step_key=step.step_key, traceback=False),
        attempt_limit=step.attempt,
        wake_at=None,
    )
