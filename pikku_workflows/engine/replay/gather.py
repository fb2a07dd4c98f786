"""`wf.call`, `wf.gather` and `wf.map` during a replay (docs/code-workflows.md, "Parallel
steps"). A round runs every member in argument order until it finishes or reaches an unfinished
step; the queued steps the round reached for the first time are dispatched together, in one
statement, and the run parks once. The members' outcomes wake it once, when the last of them
settles (store.gather_transitions). A round with a single new queued step runs it in place
instead, when the pass runs on a worker that may, and goes on. The attempts of async step
functions a round reached run together on the pass's event loop, then the next round goes on.

Each member runs on a cursor of its own, copied from the gather's (replay_pass.Cursor): however
far one member got in a pass, the keys, draws and clock of another are the same on every
replay. That is why members may be branches, several steps in order: a step is known by its key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...conf import pikku_settings
from ...control_flow import RunParked
from ...exceptions import InvalidInput, StepFailed
from ...status import StepDispatch
from ...step_keys import item_key, ordinal_key
from . import queued
from . import steps as reaches
from .async_attempts import run_together_in_pass
from .replay_pass import Cursor, ReplayPass, read_steps

Drive = Callable[[ReplayPass, reaches.StepCall], Any]


@dataclass(frozen=True)
class StepCall:
    """A step as `wf.call` describes it, for `wf.gather` to run: nothing runs before. Its key
    is its own within the gather (no other member shifts it). Checked when made (InvalidInput),
    so a gather never starts with a member it cannot run."""

    key: str
    target: Any
    data: Any = None
    # The call as checked against the registry, keyed when the gather reaches it.
    _prepared: reaches.StepCall | None = field(default=None, repr=False, compare=False)


def make_call(key: str, target: Any, data: Any, options: reaches.StepOptions) -> StepCall:
    return StepCall(key, target, data, reaches.prepare_call(key, target, data, options))


@dataclass(frozen=True)
class _Item:
    """A member that is one step: a `wf.call` (`logical`: its own key, allocated on the
    member's cursor) or an item of `wf.map` (its key fixed before the round)."""

    call: reaches.StepCall
    logical: str | None = None


@dataclass(frozen=True)
class _Outcome:
    """How a member ended its round: `value`, `failure` (what it raised), or `pending` (the key
    it waits on)."""

    value: Any = None
    failure: Exception | None = None
    pending: str | None = None


def run_gather(
    rp: ReplayPass,
    members: Sequence[Any],
    *,
    return_exceptions: bool = False,
    drive: Drive = reaches.drive_call,
) -> list[Any]:
    """Run `members` (StepCall values and callables taking no argument) together; their results
    in argument order, or the first failure raised (returned in its place with
    `return_exceptions`) once every member settled. RunParked while any waits."""
    _check_members(members, return_exceptions)
    parent = rp.cursor
    keyed = [
        _keyed(parent, member) if isinstance(member, StepCall) else member for member in members
    ]
    gather_key = next((item.call.key for item in keyed if isinstance(item, _Item)), None)
    keyed = [_in_gather(item, gather_key) for item in keyed]
    return _settle(rp, keyed, return_exceptions, drive)


def run_map(
    rp: ReplayPass,
    key: str,
    target: Any,
    items: Any,
    options: reaches.StepOptions,
    *,
    max_in_flight: int | None = None,
    drive: Drive = reaches.drive_call,
) -> list[Any]:
    """`target` called once per item (its data), as the steps `key[0]`, `key[1]`, ...: a gather
    of them, at most `max_in_flight` in flight at once (the next ones start when those settled)."""
    if not isinstance(items, list):
        raise InvalidInput(f"wf.map {key!r}: items must be a list, not {type(items).__name__}.")
    _check_fan_out(f"wf.map {key!r}", len(items), "items")
    if max_in_flight is not None and (
        isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
    ):
        raise InvalidInput(f"wf.map {key!r}: max_in_flight must be a whole number of at least 1.")
    calls = [reaches.prepare_call(key, target, item, options) for item in items]
    physical, _ = rp.allocate_key(key)
    members: list[Any] = [
        _Item(replace(call, key=item_key(physical, index), gather_key=physical))
        for index, call in enumerate(calls)
    ]
    return _settle(rp, members, False, drive, max_in_flight)


def _check_members(members: Sequence[Any], return_exceptions: Any) -> None:
    if not isinstance(return_exceptions, bool):
        raise InvalidInput("wf.gather: return_exceptions must be True or False.")
    _check_fan_out("wf.gather", len(members), "members")
    seen: set[str] = set()
    for position, member in enumerate(members):
        if isinstance(member, StepCall):
            if member.key in seen:
                raise InvalidInput(
                    f"wf.gather: the key {member.key!r} is used by two of its members; each "
                    "member needs its own."
                )
            seen.add(member.key)
        elif not callable(member):
            raise InvalidInput(
                f"wf.gather: member {position} is a {type(member).__name__}, neither a step "
                "call (wf.call) nor a callable taking no argument (a branch)."
            )


def _check_fan_out(what: str, count: int, noun: str) -> None:
    limit = pikku_settings.MAX_FAN_OUT
    if count > limit:
        raise InvalidInput(f"{what}: {count} {noun}, more than MAX_FAN_OUT ({limit}).")


def _keyed(parent: Cursor, call: StepCall) -> _Item:
    """A `wf.call` member keyed as its own cursor will key it: the next reach of its key from
    the gather's start (known now, so the gather is known by its first member's key)."""
    prepared = call._prepared
    if prepared is None:  # made as `pw.StepCall(key, target, data)`, not by `wf.call`
        prepared = reaches.prepare_call(call.key, call.target, call.data, reaches.StepOptions())
    physical = ordinal_key(call.key, parent.ordinals[call.key])
    return _Item(replace(prepared, key=physical), logical=call.key)


def _in_gather(member: Any, gather_key: str | None) -> Any:
    if isinstance(member, _Item):
        return replace(member, call=replace(member.call, gather_key=gather_key))
    return member


def _settle(
    rp: ReplayPass,
    members: list[Any],
    return_exceptions: bool,
    drive: Drive,
    max_in_flight: int | None = None,
) -> list[Any]:
    """Rounds of the members until none can go further in this pass; then park (dispatching
    what they reached), or join the members' cursors and give their results."""
    outermost = rp.batch is None
    if outermost:
        rp.gather_settled = False  # a flag left by an earlier gather says nothing of this one
    batch: list[reaches.StepCall] = []
    try:
        while True:
            if outermost:
                batch.clear()
                rp.batch, rp.async_attempts = batch, []
            outcomes, cursors = _round(rp, members, drive, max_in_flight)
            if not outermost:
                break
            attempts, rp.async_attempts = rp.async_attempts or [], None
            if attempts:
                # The async attempts the round reached run now, together; the next round
                # takes their outcomes (and reaches what follows them).
                run_together_in_pass(rp, attempts)
                continue
            if not _go_on(rp, batch, outcomes):
                break
    finally:
        if outermost:
            rp.batch, rp.async_attempts = None, None
    pending = [outcome.pending for outcome in outcomes if outcome.pending is not None]
    if pending:
        if batch:
            queued.dispatch_new_steps(rp, [_new_step(call) for call in batch])
        raise RunParked(pending[0])
    rp.cursor.join(cursors)
    return _results(outcomes, return_exceptions)


def _round(
    rp: ReplayPass, members: list[Any], drive: Drive, max_in_flight: int | None
) -> tuple[list[_Outcome], list[Cursor]]:
    """Run each member once, on its own cursor; new queued steps go to the batch."""
    parent = rp.cursor
    outcomes: list[_Outcome] = []
    cursors: list[Cursor] = []
    in_flight = 0
    for position, member in enumerate(members):
        rp.cursor = parent.member(parent.gathers, position)
        try:
            if _held_back(rp, member, in_flight, max_in_flight):
                outcome = _Outcome(pending=member.call.key)
            else:
                outcome = _run_member(rp, member, drive)
        finally:
            cursors.append(rp.cursor)
            rp.cursor = parent
        in_flight += outcome.pending is not None
        outcomes.append(outcome)
    return outcomes, cursors


def _held_back(rp: ReplayPass, member: Any, in_flight: int, max_in_flight: int | None) -> bool:
    """A map item not started yet while `max_in_flight` items are in flight: it starts in a
    later wave (an item started earlier is always driven)."""
    return (
        max_in_flight is not None
        and in_flight >= max_in_flight
        and isinstance(member, _Item)
        and member.call.key not in rp.steps
    )


def _run_member(rp: ReplayPass, member: Any, drive: Drive) -> _Outcome:
    try:
        value = drive(rp, _reach(rp, member)) if isinstance(member, _Item) else member()
    except RunParked as parked:
        return _Outcome(pending=str(parked))
    except StepFailed as failed:
        return _Outcome(failure=failed)
    except Exception as exc:
        if isinstance(member, _Item):
            raise  # a mistake in the call itself (not its step's failure) fails the body now
        return _Outcome(failure=exc)
    return _Outcome(value=value)


def _reach(rp: ReplayPass, member: _Item) -> reaches.StepCall:
    """The member's reach of its step, on its own cursor: its key allocated (a `wf.call`) or
    claimed (a map item), its lineage the key reached before the gather."""
    if member.logical is not None:
        physical, from_key = rp.allocate_key(member.logical)
        assert physical == member.call.key, "keyed before the round as the cursor keys it"
        return replace(member.call, from_key=from_key)
    rp.claim_key(member.call.key)
    from_key, rp.cursor.last_key = rp.cursor.last_key, member.call.key
    return replace(member.call, from_key=from_key)


def _go_on(rp: ReplayPass, batch: list[reaches.StepCall], outcomes: list[_Outcome]) -> bool:
    """Whether one more round can move the members on in this pass: a member the pass settled
    was the gather's last by the tables' account while the pass had read others in flight (their
    rows are read again), or the round's one new queued step can run in place here."""
    if not any(outcome.pending for outcome in outcomes):
        return False
    if rp.gather_settled:
        rp.gather_settled = False
        rp.steps.update(read_steps(rp.run.pk, gather_key__isnull=False))
        return True
    if len(batch) != 1 or rp.inline_caller:
        return False
    call = batch[0]
    assert call.definition is not None  # only queued step functions are batched
    if not queued.runs_in_place(call.definition, call.timeout_ms):
        return False
    batch.clear()
    reaches.run_in_pass(rp, call, StepDispatch.IN_PLACE)
    return True


def _new_step(call: reaches.StepCall) -> queued.NewStep:
    assert call.definition is not None  # only queued step functions are batched
    return queued.NewStep(call.key, call.definition, reaches.step_row_fields(call))


def _results(outcomes: list[_Outcome], return_exceptions: bool) -> list[Any]:
    failures = [outcome.failure for outcome in outcomes if outcome.failure is not None]
    if failures and not return_exceptions:
        raise failures[0]
    return [
        outcome.failure if outcome.failure is not None else outcome.value for outcome in outcomes
    ]
