"""`pw.update`: a write that answers. The workflow's validator runs in the caller against the
run's input, state and the payload; a refusal (`UpdateRejected`) writes nothing. An accepted
update is a row, deduplicated by `update_id`, sent to the run as a signal `wf.receive` takes in
order, audited as `update` with who sent it; the caller waits for `wf.reply`'s answer, woken by
its NOTIFY on PostgreSQL, polling elsewhere (docs/long-lived-runs.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration
from ...durations import parse_duration
from ...exceptions import (
    InvalidInput,
    InvalidTransition,
    RunNotFound,
    UpdateRejected,
    UpdateTimeout,
)
from ...models import WorkflowAuditEntry, WorkflowRun, WorkflowUpdate
from ...registry import registry
from ...serialization import NotStorableJson, round_trip
from ...status import TERMINAL_RUN_STATUSES
from ...validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH, checked_text
from ..store.continue_transitions import chain_from, latest_in_chain
from ..store.signal_rows import deliver_signals_txn
from ..store.update_transitions import (
    accept_update_txn,
    answer_channel,
    existing_update_txn,
    pending_update_count_txn,
)
from .reads import run_pk
from .runs import checked_user
from .signals import check_may_signal, lock_latest_run_txn

logger = logging.getLogger(__name__)

WAITS = ("completed", "accepted")
# Without notices (not PostgreSQL, or a caller inside a transaction): the reply usually comes
# within one pass, so poll often at first, then back off to a bound.
POLL_FIRST_SECONDS = 0.002
POLL_GROWTH = 1.5
POLL_MAX_SECONDS = 0.05
# With notices, the row is read again at least this often all the same (a connection that
# dropped its LISTEN, say, costs a second, not the whole timeout).
NOTICE_RECHECK_SECONDS = 1.0


def update(
    run_id: Any,
    name: str,
    payload: Any = None,
    *,
    wait: str = "completed",
    timeout: int | str | timedelta | None = "10s",
    update_id: str | None = None,
    by: Any = None,
) -> Any:
    """Send the update `name` to the run (or the latest run of its chain) and return the answer
    `wf.reply` gives it; with `wait="accepted"` its update id at once. The same `update_id`
    again is the same update (one row, one answer). `UpdateTimeout` when no answer comes within
    `timeout`: the update stays accepted. `by` must be allowed to signal the run (its starter,
    or a holder of `signal_workflowrun`), else `SignalForbidden`."""
    pk = run_pk(run_id)
    if wait not in WAITS:
        raise InvalidInput(f'wait is "completed" or "accepted", not {wait!r}.')
    seconds = None if timeout is None else parse_duration(timeout, what="timeout") / 1000
    checked_text(name, "An update name", max_length=NAME_MAX_LENGTH)
    try:
        payload = round_trip(payload, name="payload")
    except NotStorableJson as exc:
        raise InvalidInput(f"The payload of update {name!r} is not storable JSON: {exc}") from exc
    if update_id is None:
        update_id = uuid.uuid4().hex
    checked_text(update_id, "The update_id", max_length=KEY_MAX_LENGTH)
    by = checked_user(by, "by")
    if by is not None:
        check_may_signal(pk, name, by)  # who may signal a run may update it
    _validate(pk, name, payload)
    accepted = _accept(pk, name, update_id, payload, by)
    if wait == "accepted":
        return update_id
    return _answer(accepted, update_id, seconds)


def _validate(pk: Any, name: str, payload: Any) -> None:
    """Run the workflow's validator for `name` against the latest run of the chain."""
    run = WorkflowRun.objects.filter(pk=latest_in_chain(pk)).values("workflow", "input", "state")
    found = run.first()
    if found is None:
        raise RunNotFound(pk)
    definition = registry.workflows.get(found["workflow"])
    validator = None if definition is None else definition.updates.get(name)
    if validator is None:
        raise InvalidInput(f"Workflow {found['workflow']!r} takes no update {name!r}.")
    try:
        validator(found["input"], found["state"], payload)
    except UpdateRejected:
        raise
    except Exception as exc:
        # A bug in the validator: the caller gets its message, not a 500, and it is logged.
        logger.exception("pikku_workflows: the validator of update %r raised", name)
        raise UpdateRejected(f"The validator of update {name!r} failed: {exc}") from exc


def _accept(pk: Any, name: str, update_id: str, payload: Any, by: Any) -> int:
    """The row of the update (the existing one for a repeated `update_id`)."""
    with transaction.atomic():
        latest, status = lock_latest_run_txn(pk)
        if status is None:
            raise RunNotFound(pk)
        existing = existing_update_txn(chain_from(pk), update_id)
        if existing is not None:
            return existing.pk
        if status in TERMINAL_RUN_STATUSES:
            raise InvalidTransition(
                f"run {latest}",
                status,
                "updated",
                message=f"Run {latest} is {status}: it takes no more updates ({name!r} refused).",
            )
        limit = pikku_settings.MAX_PENDING_UPDATES
        if pending_update_count_txn(latest) >= limit:
            raise InvalidTransition(
                f"run {latest}",
                status,
                "updated",
                message=f"Run {latest} already holds {limit} "
                f"updates no reply answered (MAX_PENDING_UPDATES): {name!r} refused.",
            )
        accepted = accept_update_txn(latest, name, update_id, payload, by)
        taken = deliver_signals_txn(latest)
        step = next((step for sent, step in taken if sent.pk == accepted.signal_id), None)
        WorkflowAuditEntry.objects.create(
            run_id=latest,
            step=step,
            action="update",
            user=by,
            payload={
                "update": name,
                "update_id": update_id,
                "taken_by_step": step.step_key if step is not None else None,
            },
        )
        if taken:
            enqueue_orchestration(latest)  # after the commit
    return accepted.pk


def _answer(update_pk: int, update_id: str, seconds: float | None) -> Any:
    """Wait for the reply: on PostgreSQL woken by its NOTIFY (LISTEN first, then read the row,
    so an answer committed in between is read, not missed), elsewhere by a growing poll."""
    deadline = None if seconds is None else time.monotonic() + seconds
    delay = POLL_FIRST_SECONDS
    with _listening(answer_channel(update_pk)) as wait_for_notice:
        while True:
            row = WorkflowUpdate.objects.filter(pk=update_pk)
            answer = row.values("completed_at", "result").first()
            if answer is not None and answer["completed_at"] is not None:
                return answer["result"]
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise UpdateTimeout(
                    f"Update {update_id!r} was not answered within {seconds:g} s; "
                    "it stays accepted.",
                    update_id=update_id,
                )
            if wait_for_notice is not None:
                wait_for_notice(NOTICE_RECHECK_SECONDS if left is None else left)
                continue
            time.sleep(delay if left is None else min(delay, left))
            delay = min(delay * POLL_GROWTH, POLL_MAX_SECONDS)


@contextlib.contextmanager
def _listening(channel: str) -> Iterator[Callable[[float], None] | None]:
    """While inside, this connection LISTENs on `channel` (PostgreSQL, outside a transaction:
    a LISTEN inside one would wait for its commit), and the value waits up to the seconds given
    for a notice, at most NOTICE_RECHECK_SECONDS; None where notices do not apply."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield None
        return
    # Here, not at the top: on SQLite psycopg may be installed without a libpq to load.
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute(f'LISTEN "{channel}"')
    listener = connection.connection

    def wait_for_notice(seconds: float) -> None:
        timeout = min(seconds, NOTICE_RECHECK_SECONDS)
        try:
            for _ in listener.notifies(timeout=timeout, stop_after=1):
                return
        except psycopg.Error:
            # The connection broke while waiting: the next read reconnects, and the waits
            # left are a bounded poll.
            connection.close()
            time.sleep(min(timeout, POLL_MAX_SECONDS))

    try:
        yield wait_for_notice
    finally:
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute(f'UNLISTEN "{channel}"')
