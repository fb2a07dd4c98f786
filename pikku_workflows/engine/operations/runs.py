"""Starting runs (`start_workflow`) and waiting for them (`run_to_completion`).

Every argument is checked before anything is written: a bad one is an `InvalidInput` (or
`WorkflowNotFound`) and leaves no run behind.
"""

from __future__ import annotations

import logging
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import Error as DatabaseError
from django.db import IntegrityError, models, transaction

from ...dispatch import enqueue_orchestration
from ...durations import parse_duration
from ...exceptions import (
    IdempotencyConflict,
    InvalidInput,
    RunCancelled,
    RunFailed,
    RunSuspended,
    RunTimeout,
    WorkflowDispatchException,
    _RunEnded,
)
from ...flow import OnFull
from ...models import WorkflowRun, WorkflowRunTombstone
from ...registry import registry, validate_graph_functions
from ...serialization import NotStorableJson, round_trip
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...validation import KEY_MAX_LENGTH, checked_text
from ..replay.orchestrator import orchestrate
from ..replay.replay_pass import LeasedRun
from ..store.continue_transitions import latest_in_chain
from ..store.leases import new_lease_holder
from ..store.run_rows import start_run_row
from .control import settle_refused_txn
from .reads import get_run_status, missing_run, run_pk
from .users import checked_user

logger = logging.getLogger(__name__)

# How long `run_to_completion` waits unless told: a shell or a test is not blocked for the
# length of a long sleep (or for ever, with no worker to go on with a parked run).
DEFAULT_WAIT = "1m"

POLL_FIRST_SECONDS = 0.01
POLL_GROWTH = 1.6
POLL_MAX_SECONDS = 1.0


def start_workflow(
    name: str,
    input: Any = None,
    *,
    inline: bool = False,
    idempotency_key: str | None = None,
    started_by: Any = None,
    subject: Any = None,
    scope: str = "",
) -> str:
    """Create a run and return its id; never raises for a failing body (the run records it).

    `idempotency_key` names the run within its `scope` (a tenant, say): the same key and input
    in the same scope return the same run, and keys of different scopes never meet.

    `inline=True` drives the run in this process until it completes, fails or parks. Inside an
    open `transaction.atomic()` the run (and an inline pass) live in that transaction: they
    vanish with a rollback, and queued work is enqueued only after the commit.
    """
    run_id, _ = start_run(
        name,
        input,
        inline=inline,
        idempotency_key=idempotency_key,
        started_by=started_by,
        subject=subject,
        scope=scope,
    )
    return run_id


def start_run(
    name: str,
    input: Any = None,
    *,
    inline: bool = False,
    idempotency_key: str | None = None,
    started_by: Any = None,
    subject: Any = None,
    scope: str = "",
    origin: dict[str, Any] | None = None,
) -> tuple[str, bool]:
    """`start_workflow`, also saying whether this call created the run (False: the run the
    idempotency key already named, including when another caller's insert won the race).
    `origin` holds the engine's own columns of a new run (`schedule`, `scheduled_for`); such a
    run is its tick's own, never joined to a debounce window."""
    definition = registry.get_workflow(name)
    if definition.graph is not None:
        # Step functions may register after the graph: its names are checked at each start.
        validate_graph_functions(definition.graph, registry, name)
    if not isinstance(inline, bool):
        raise InvalidInput(f"inline must be True or False, not {inline!r}.")
    try:
        input = round_trip(input, name="input", instance_hint=", or subject=")
    except NotStorableJson as exc:
        raise InvalidInput(f"The input of {name!r} is not storable JSON: {exc}") from exc
    if idempotency_key is not None:
        checked_text(idempotency_key, "The idempotency_key", max_length=KEY_MAX_LENGTH)
    checked_text(scope, "The idempotency scope", max_length=KEY_MAX_LENGTH, allow_empty=True)
    fields = {"started_by": checked_user(started_by, "started_by"), **_subject_fields(subject)}
    fields.update(origin or {})
    holder = new_lease_holder() if inline else None
    key = IdempotencyKey(name, scope, idempotency_key)
    # A key whose run was purged long ago answers here without an insert; one purged while
    # this start goes on is caught by the guard in `_create_or_reuse`.
    purged = key.purged_run()
    if purged is not None:
        return str(purged), False
    try:
        run, created = _create_or_reuse(key, input, holder, fields, debounce=origin is None)
    except _KeyOfPurgedRun as exc:
        return str(exc.run_id), False
    if created and run.status == RunStatus.RUNNING:
        _begin(run, holder)
    return str(run.pk), created


def _subject_fields(subject: Any) -> dict[str, Any]:
    if subject is None:
        return {}
    if not isinstance(subject, models.Model) or subject.pk is None:
        raise InvalidInput(
            f"subject must be a saved model instance (or None), not {type(subject).__name__}."
        )
    subject_id = checked_text(str(subject.pk), "The subject's id", max_length=KEY_MAX_LENGTH)
    return {"subject_type": ContentType.objects.get_for_model(subject), "subject_id": subject_id}


@dataclass(frozen=True)
class IdempotencyKey:
    """What names a run for its idempotency: its workflow, the key's scope, and the key (None:
    the run has no key, and every start creates one)."""

    workflow: str
    scope: str
    key: str | None

    def existing_run(self) -> WorkflowRun | None:
        if self.key is None:
            return None
        return WorkflowRun.objects.filter(
            workflow=self.workflow, idempotency_scope=self.scope, idempotency_key=self.key
        ).first()

    def purged_run(self) -> Any:
        """The id of the purged run the key named, while its tombstone is kept (its input is
        gone with it: the key answers with the id whatever the input)."""
        if self.key is None:
            return None
        tombstones = WorkflowRunTombstone.objects.filter(
            workflow=self.workflow, idempotency_scope=self.scope, idempotency_key=self.key
        )
        return tombstones.values_list("pk", flat=True).first()


class _KeyOfPurgedRun(Exception):
    """The idempotency key named a run a purge took while this start went on: its insert is
    rolled back, and the start answers with the purged run's id."""

    def __init__(self, run_id: Any) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def _create_or_reuse(
    key: IdempotencyKey, input: Any, holder: str | None, fields: dict[str, Any], *, debounce: bool
) -> tuple[WorkflowRun, bool]:
    """The new run (an inline one born leased to `holder`), or the one `key` already names, or
    the debounced run the start joined (not created: False); `_KeyOfPurgedRun` when a purge took
    the key's run meanwhile."""
    existing = key.existing_run()
    if existing is not None:
        return _same_input(existing, input, key), False
    # Only a savepoint lets an enclosing transaction survive a duplicate key (IntegrityError);
    # a skip is audited, and a replace cancels, while the start holds its key's count row; a
    # keyed insert is undone when the key turns out to be a purged run's.
    in_transaction = transaction.get_connection().in_atomic_block
    rule = registry.get_workflow(key.workflow).concurrency
    settles = rule is not None and rule.on_full != OnFull.QUEUE
    keyed = key.key is not None
    guarded = transaction.atomic if in_transaction or settles or keyed else nullcontext
    try:
        with guarded():
            run, joined = start_run_row(
                key.workflow,
                input,
                inline=holder is not None,
                lease_holder=holder,
                debounce=debounce,
                idempotency_key=key.key,
                idempotency_scope=key.scope,
                **fields,
            )
            if getattr(run, "refused_slot", False):
                settle_refused_txn(run)
            _refuse_key_of_purged_run(key)
    except IntegrityError:
        # Another caller created (or joined) the run with this key between our read and write
        # (and a purge may have taken it since).
        existing = key.existing_run()
        if existing is None:
            _refuse_key_of_purged_run(key)
            raise
        return _same_input(existing, input, key), False
    return run, not joined


def _refuse_key_of_purged_run(key: IdempotencyKey) -> None:
    """After the insert, in its transaction: `_KeyOfPurgedRun` when the key names a purged run.

    A purge deletes a run and writes its tombstone in one transaction. The insert passed the
    key's unique index, so no run held the key any more: either none ever did, or the purge that
    deleted it had committed before the insert went on (the index made the insert wait for it).
    This statement reads after the insert, so it sees that purge's tombstone: whatever a purge
    commits between the start's first reads and its insert, the key never starts a second run.
    """
    purged = key.purged_run()
    if purged is not None:
        raise _KeyOfPurgedRun(purged)


def _same_input(run: WorkflowRun, input: Any, key: IdempotencyKey) -> WorkflowRun:
    if run.input != input:
        raise IdempotencyConflict(run.workflow, key.key or "")
    return run


def _begin(run: WorkflowRun, holder: str | None) -> None:
    try:
        if holder is not None:
            # Born leased, and new: the first pass has no steps to read.
            orchestrate(run.pk, inline_caller=True, leased=LeasedRun(run, holder, steps={}))
        else:
            enqueue_orchestration(run.pk)
    except (DatabaseError, WorkflowDispatchException):
        if transaction.get_connection().in_atomic_block:
            raise  # the caller's transaction is what failed: it must know
        # The run is recorded; recovery relays it once the queue (or the database) is back.
        logger.warning("pikku_workflows: run %s not driven now; recovery will relay it", run.pk)


def run_to_completion(
    name: str,
    input: Any = None,
    *,
    timeout: str | timedelta | float | None = DEFAULT_WAIT,
) -> Any:
    """Start the run inline and wait until it ends: its output, or RunFailed/RunCancelled/
    RunSuspended; RunTimeout when `timeout` ("30s", "2m", a timedelta; one minute unless
    given) passes first, saying what the run waits on. `timeout=None` waits for the run however
    long it takes (a run that parked on a long sleep or an approval goes on on a worker). A
    bare number is seconds, deprecated: every other duration takes an int as milliseconds. In
    tests, `pikku_workflows.testing.drain(run_id, advance="10m")` lets timers pass without
    waiting.

    Inside an open transaction a run that parks could never finish (workers cannot see it
    before the commit): it is refused with InvalidInput, and nothing of it is kept.
    """
    seconds = _timeout_seconds(timeout)
    if not transaction.get_connection().in_atomic_block:
        return wait_for_run(start_workflow(name, input, inline=True), timeout=seconds)
    try:
        with transaction.atomic():
            run_id = latest_in_chain(start_workflow(name, input, inline=True))
            status = WorkflowRun.objects.filter(pk=run_id).values_list("status", flat=True)[0]
            if status not in TERMINAL_RUN_STATUSES and status != RunStatus.SUSPENDED:
                raise _ParkedInTransaction
    except _ParkedInTransaction:
        raise InvalidInput(
            f"A {name!r} run parked (a sleep, a queued step, a child run) inside your "
            "transaction, where no worker can see it before you commit: call "
            "run_to_completion outside transaction.atomic(), or start_workflow() and commit."
        ) from None
    return wait_for_run(run_id, timeout=seconds)


class _ParkedInTransaction(Exception):
    """Rolls back the savepoint of a run that parked inside the caller's transaction."""


def _timeout_seconds(timeout: Any) -> float | None:
    """The timeout in seconds, from the duration vocabulary ("30s", a timedelta), or a bare
    number of seconds: what `run_to_completion` took before it spoke durations, kept working."""
    if timeout is None:
        return None
    if isinstance(timeout, str | timedelta):
        try:
            return parse_duration(timeout, what="timeout") / 1000
        except InvalidInput as exc:
            raise InvalidInput(f"timeout: {exc.message}") from exc
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise InvalidInput(f'timeout is a duration ("30s", "2m", a timedelta), not {timeout!r}.')
    # An int means milliseconds everywhere else, so a bare number here reads as a slip.
    warnings.warn(
        f'run_to_completion(timeout={timeout!r}) is seconds; pass a duration such as "{timeout}s".',
        DeprecationWarning,
        stacklevel=3,
    )
    return float(timeout)


def _timed_out(run_id: Any, timeout: float) -> RunTimeout:
    """RunTimeout for the run, saying what it waits on now."""
    waiting = get_run_status(run_id)["waiting_on"] or {}
    return RunTimeout(run_id, timeout, waiting_on=waiting)


def wait_for_run(run_id: Any, *, timeout: float | None = None) -> Any:
    """The output of the run, or of the last run of its chain (`wf.continue_as_new`)."""
    pk = run_pk(run_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = POLL_FIRST_SECONDS
    while True:
        run = WorkflowRun.objects.filter(pk=pk).values("status", "output", "error").first()
        if run is None:
            raise missing_run(run_id)
        if run["status"] == RunStatus.COMPLETED:
            return run["output"]
        if run["status"] == RunStatus.CONTINUED:
            pk = latest_in_chain(pk)
            run_id = str(pk)  # what failed or waits is the chain's latest run
            continue
        ended: type[_RunEnded] | None = {
            RunStatus.FAILED.value: RunFailed,
            RunStatus.CANCELLED.value: RunCancelled,
            RunStatus.SUSPENDED.value: RunSuspended,
        }.get(run["status"])
        if ended is not None:
            raise ended(run_id, run["error"])
        if deadline is not None and time.monotonic() >= deadline:
            raise _timed_out(run_id, timeout or 0)
        pause = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
        time.sleep(pause)
        delay = min(delay * POLL_GROWTH, POLL_MAX_SECONDS)
