"""One attempt of an atomic step function (`atomic=True`): its ORM writes and its result commit
in one transaction on the engine's database, ended by the attempt-fenced write of the result
(docs/code-workflows.md, "Exactly once").

An attempt superseded meanwhile (its lease lapsed and another attempt claimed the step) writes
nothing: its fenced write refuses, which rolls the user's writes back with it. A raised error
or a timeout rolls them back too; that failure is then recorded in its own transaction. The
attempt's slots of a limit's `max_running` are freed in whichever transaction records it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import DataError, transaction

from ...control_flow import TimeLimitAlarm
from ...exceptions import InvalidTransition, StepSuperseded
from ...models import WorkflowStep
from ...observability.log_context import logging_for_attempt
from ...serialization import NotStorableJson, round_trip
from ..store.leases import heartbeat
from ..store.limit_slots import release_slots_txn
from .attempts import (
    Outcome,
    free_limit_slots,
    record_success,
    time_limit,
    timed_out,
    unstorable_error,
    user_error,
)


class _Unstorable(Exception):
    """The result cannot be stored: the attempt's transaction rolls back, and it fails."""


def call_atomically(
    step: WorkflowStep,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    continue_as: str | None = None,
) -> Outcome:
    """Call the step function inside `transaction.atomic()` and record its result in the same
    transaction (`continue_as`: as `record_outcome`). The success comes back recorded; a failure
    comes back for the caller to record (its writes already rolled back). StepSuperseded, when
    a newer attempt owns the step, after the rollback."""
    heartbeat.hold_step(step.pk, step.attempt)
    try:
        with transaction.atomic():
            with (
                logging_for_attempt(step.run_id, step.step_key, step.attempt),
                time_limit(step.timeout_ms),
            ):
                value = func(*args)
            try:
                result = round_trip(value)
            except NotStorableJson as exc:
                raise _Unstorable(str(exc)) from exc
            try:
                recorded = record_success(step, result, continue_as)
            except DataError as exc:
                raise _Unstorable(str(exc)) from exc
            release_slots_txn(step.pk, step.attempt)
    except (StepSuperseded, InvalidTransition):
        # Rolled back: the attempt that owns the step now is the one that counts.
        free_limit_slots(step)
        raise
    except TimeLimitAlarm:
        return timed_out(step)
    except _Unstorable as exc:
        return Outcome(False, unstorable_error(step, str(exc)))
    except Exception as exc:
        return Outcome(False, user_error(step, exc))
    except BaseException:
        free_limit_slots(step)  # no outcome will be recorded: nothing else frees them
        raise
    finally:
        heartbeat.drop_step(step.pk, step.attempt)
    return Outcome(True, result, recorded)
