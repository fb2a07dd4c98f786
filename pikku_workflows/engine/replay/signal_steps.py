"""What `wf.wait_for_signal` does during a replay: the first reach parks the step (`waiting`,
its timeout as its timer) and takes a signal already kept for it, if one came first; later
reaches return the payload it got, or raise `SignalTimeout` (which the body may catch)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction

from ...control_flow import RunParked
from ...durations import parse_duration
from ...exceptions import NonDeterministicReplay, SignalTimeout
from ...models import WorkflowStep
from ...registry import validate_step_key
from ...status import StepKind, StepStatus
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.claims import lock_running_run_txn
from ..store.signal_rows import hand_over_signal_txn, wait_name
from ..store.step_transitions import note_attempt_end, park_step_txn
from .attempts import record_kept
from .queued import receive_hold_seconds
from .replay_pass import ReplayPass, read_steps


def run_wait_for_signal(
    rp: ReplayPass, key: str, name: str, timeout: int | str | timedelta | None
) -> Any:
    validate_step_key(key)
    checked_text(name, "A signal name", max_length=NAME_MAX_LENGTH)
    return wait_at(rp, key, name, timeout)


def wait_at(
    rp: ReplayPass,
    key: str,
    name: str,
    timeout: int | str | timedelta | None,
    *,
    wakes: str | None = None,
) -> Any:
    """`wf.wait_for_signal` at a key the caller checked (the engine's own, for `wf.receive`).
    `wakes`: the channel a delivery to this wait is announced on; a worker's pass then waits
    for it in place for a while (`receive_hold_seconds`) before parking the run."""
    timeout_ms = None if timeout is None else parse_duration(timeout, what="signal timeout")
    physical, from_key = rp.allocate_key(key)
    step = rp.steps.get(physical)
    if step is not None and (step.kind != StepKind.SIGNAL or wait_name(step) != name):
        recorded = f"signal {wait_name(step)!r}" if step.kind == StepKind.SIGNAL else step.kind
        raise NonDeterministicReplay(physical, recorded, f"signal {name!r}")
    hold = 0.0 if wakes is None or rp.cursor.path else receive_hold_seconds()
    if step is None or step.status == StepStatus.PENDING:
        # First reach, or a new attempt after retry_run re-armed a timed-out wait.
        waiting = step
        step = _held(
            rp,
            physical,
            wakes,
            hold,
            lambda: _wait(rp, physical, from_key, name, timeout_ms, waiting),
        )
    elif step.status == StepStatus.WAITING and hold:
        step = _held(rp, physical, wakes, hold, lambda: _read_step(rp, physical))
    if step.status == StepStatus.SUCCEEDED:
        rp.consume(step)
        return step.result
    if step.status == StepStatus.FAILED:
        rp.consume(step)
        message = (step.error or {}).get("message") or None
        raise SignalTimeout(message, step_key=physical, signal=name)
    raise RunParked(physical)


def _held(
    rp: ReplayPass,
    key: str,
    wakes: str | None,
    seconds: float,
    wait: Callable[[], WorkflowStep],
) -> WorkflowStep:
    """The wait `wait()` parks (or reads), after waiting in place up to `seconds` for a delivery
    announced on `wakes`. LISTEN comes first, so a delivery that commits after the wait's own
    commit is announced to this pass; one before it is taken by the wait's own commit."""
    wait_for_notice = None if wakes is None or seconds <= 0 else rp.listener.waiter(wakes)
    deadline = time.monotonic() + seconds
    step = wait()
    while (
        wait_for_notice is not None
        and step.status == StepStatus.WAITING
        and (left := deadline - time.monotonic()) > 0
    ):
        wait_for_notice(left)
        step = _read_step(rp, key)
    return step


def _read_step(rp: ReplayPass, key: str) -> WorkflowStep:
    step = read_steps(rp.run.pk, step_key=key)[key]
    rp.steps[key] = step
    return step


def _wait(
    rp: ReplayPass,
    key: str,
    from_key: str | None,
    name: str,
    timeout_ms: int | None,
    step: WorkflowStep | None,
) -> WorkflowStep:
    """Park the step and take a signal kept before it, in one commit under the run's lock."""
    record_kept(rp)
    with transaction.atomic():
        lock_running_run_txn(rp.run.pk, rp.holder)
        step = park_step_txn(
            rp.run.pk,
            key,
            step,
            kind=StepKind.SIGNAL,
            data={"signal": name, "timeout_ms": timeout_ms},
            from_step_key=from_key,
            wake_in_ms=timeout_ms,
        )
        # Only this wait is new: a signal of its name is all this transaction can hand over.
        handed = hand_over_signal_txn(rp.run.pk, name)
        if handed is not None and handed.step == step.pk:
            step.refresh_from_db(fields=["status", "result", "wake_at"])
            note_attempt_end(step, handed.ended_at)
    rp.steps[key] = step
    return step
