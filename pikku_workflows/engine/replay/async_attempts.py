"""Attempts of async step functions (`async def`): run on the event loop their pass owns, one at
a time or, the attempts a gather's round reached, together; each under its step's timeout (the
loop cancels it) and recorded exactly as a sync attempt is (docs/code-workflows.md, "Async step
functions")."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...models import WorkflowStep
from ...observability.log_context import logging_for_attempt
from ...retry import RetryPolicy
from ..store.leases import heartbeat
from .attempts import (
    Outcome,
    finish_in_pass,
    free_limit_slots,
    stored_outcome,
    timed_out,
    user_error,
)
from .event_loop import OwnedEventLoop
from .replay_pass import ReplayPass


def is_async(func: Callable[..., Any] | None) -> bool:
    return inspect.iscoroutinefunction(func)


@dataclass(frozen=True)
class AsyncAttempt:
    """An attempt of an async step function, claimed (its step running under it), not run yet."""

    step: WorkflowStep
    func: Callable[..., Any]
    args: tuple[Any, ...]
    policy: RetryPolicy


def call_async_user_code(
    loop: OwnedEventLoop, step: WorkflowStep, func: Callable[..., Any], args: tuple[Any, ...]
) -> Outcome:
    """`call_user_code` for an async step function: awaited on `loop`, outside any transaction."""
    try:
        return loop.run(_attempt(step, func, args))
    except BaseException:
        # No outcome will be recorded (its slots go with it otherwise); out of the loop: the
        # database is not for its coroutines' thread while it runs.
        free_limit_slots(step)
        raise


def run_together_in_pass(rp: ReplayPass, attempts: list[AsyncAttempt]) -> None:
    """Run the attempts concurrently on the pass's loop, then record each outcome in the order
    they were reached (fenced by attempt: a pass that lost the run records nothing more)."""
    try:
        outcomes = rp.event_loop.run(_together(attempts))
    except BaseException:
        for attempt in attempts:
            free_limit_slots(attempt.step)  # no outcome will be recorded
        raise
    for attempt, outcome in zip(attempts, outcomes, strict=True):
        finish_in_pass(rp, attempt.step, outcome, attempt.policy)


async def _together(attempts: list[AsyncAttempt]) -> list[Outcome]:
    # Each attempt turns whatever its user code raised into its Outcome: gather never fails.
    return list(await asyncio.gather(*(_attempt(a.step, a.func, a.args) for a in attempts)))


async def _attempt(step: WorkflowStep, func: Callable[..., Any], args: tuple[Any, ...]) -> Outcome:
    heartbeat.hold_step(step.pk, step.attempt)
    limit = asyncio.timeout(None if step.timeout_ms is None else step.timeout_ms / 1000)
    try:
        with logging_for_attempt(step.run_id, step.step_key, step.attempt):
            async with limit:
                value = await func(*args)
    except TimeoutError as exc:
        if limit.expired():
            return timed_out(step)
        return Outcome(False, user_error(step, exc))
    # A CancelledError the step raised itself (not our timeout's) is its failure, as any error.
    except (Exception, asyncio.CancelledError) as exc:
        return Outcome(False, user_error(step, exc))
    finally:
        heartbeat.drop_step(step.pk, step.attempt)
    return stored_outcome(step, value)
