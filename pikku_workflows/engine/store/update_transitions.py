"""Updates in the tables (`pw.update`): accepted as a row and sent to the run as a signal of the
engine's own name (so `wf.receive` takes them in order, each once, and a hand-over moves them
with the other signals), then completed once by `wf.reply`: audited as `reply` and, on
PostgreSQL, announced with a NOTIFY on the update's own channel, which its caller LISTENs on.

On PostgreSQL each of these is a fixed number of statements (update_transitions.sql): keeping
an update (with its dedupe and its limit) is one, announcing it (audit row, the receiving
pass's wake, the run's next pass) one, answering it one. Elsewhere the ORM writes the same rows.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ...dispatch import (
    enqueue_orchestration,
    queue_fragments,
    queue_in_engine_database,
    run_messages_params,
)
from ...models import WorkflowAuditEntry, WorkflowUpdate
from ...querysets import DatabaseNow
from ...sql import Statements
from ...status import RunStatus
from .signal_rows import keep_signal_txn
from .tables import engine_names
from .transitions import on_postgresql

STATEMENTS = Statements(
    Path(__file__).with_name("update_transitions.sql"),
    names=engine_names,
    fragments=queue_fragments,
)

# Signals of this prefix carry updates: `:` is no part of a name `pw.update` accepts.
UPDATE_SIGNAL_PREFIX = "update:"
# The audit actions of an accepted update and of its answer (the run's timeline shows both).
UPDATE_ACTION = "update"
REPLY_ACTION = "reply"
ANSWER_CHANNEL_PREFIX = "pikku_update_"


def update_signal_name(name: str) -> str:
    return f"{UPDATE_SIGNAL_PREFIX}{name}"


@dataclass(frozen=True)
class KeptUpdate:
    """What keeping an update found or wrote: the row a repeated `update_id` already names
    (nothing written), or the new row and its signal (None when refused: the run was not
    `open`, or it held `pending` updates no reply answered, the limit)."""

    existing: int | None
    pending: int
    update: int | None = None
    signal: int | None = None


def keep_update_txn(
    chain: list[Any],
    run_id: Any,
    *,
    open: bool,
    limit: int,
    name: str,
    update_id: str,
    payload: Any,
    by: Any,
) -> KeptUpdate:
    """Inside the lock of `run_id` (the latest run of `chain`): the update `update_id` of the
    chain if one of its runs holds it; else, while the run is `open` and below `limit`, the
    update kept with the signal that hands it to `wf.receive`."""
    assert transaction.get_connection().in_atomic_block
    message = {
        "id": update_id,
        "name": name,
        "payload": payload,
        "by": by.get_username() if by is not None else None,
    }
    if on_postgresql():
        params = {
            "chain": [str(run) for run in chain],
            "run_id": str(run_id),
            "open": open,
            "limit": limit,
            "name": name,
            "update_id": update_id,
            "payload": _json(payload),
            "by": by.pk if by is not None else None,
            "signal_name": update_signal_name(name),
            "message": _json(message),
            "now": timezone.now(),
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["accept_update"], params)
            return KeptUpdate(*cursor.fetchone())
    existing = WorkflowUpdate.objects.filter(run_id__in=chain, update_id=update_id).first()
    if existing is not None:
        return KeptUpdate(existing.pk, 0)
    pending = WorkflowUpdate.objects.filter(run_id=run_id, completed_at__isnull=True).count()
    if not open or pending >= limit:
        return KeptUpdate(None, pending)
    signal = keep_signal_txn(run_id, update_signal_name(name), message, by)
    update = WorkflowUpdate.objects.create(
        run_id=run_id, name=name, update_id=update_id, payload=payload, sent_by=by, signal=signal
    )
    return KeptUpdate(None, pending, update.pk, signal.pk)


def announce_update_txn(
    run_id: Any, step_id: Any, taken: bool, audit: dict[str, Any], by: Any
) -> None:
    """Inside the run's lock, once the update is kept and handed to the waits (`step_id`: the
    wait that took it, or None; `taken`: a wait took a signal, this one or an older one): its
    `update` audit row; when taken, the wake of a pass waiting in place at `wf.receive` and the
    run's next pass (one statement on PostgreSQL with the queue in its database: from the
    lease's live holder, else from a queue message)."""
    assert transaction.get_connection().in_atomic_block
    if on_postgresql() and queue_in_engine_database():
        params = {
            "run_id": str(run_id),
            "step_id": None if step_id is None else str(step_id),
            "action": UPDATE_ACTION,
            "audit": _json(audit),
            "by": by.pk if by is not None else None,
            "now": timezone.now(),
            "taken": taken,
            "running": RunStatus.RUNNING,
            "receive_channel": receive_channel(run_id),
            **run_messages_params([run_id]),
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["announce_update"], params)
        return
    WorkflowAuditEntry.objects.create(
        run_id=run_id, step_id=step_id, action=UPDATE_ACTION, user=by, payload=audit
    )
    if taken:
        if on_postgresql():
            with connection.cursor() as cursor:
                cursor.execute(STATEMENTS["wake_receiver"], {"channel": receive_channel(run_id)})
        enqueue_orchestration(run_id)  # after the commit


def answered_update_ids(run_id: Any) -> set[str]:
    """The update ids of the run's answered updates."""
    answered = WorkflowUpdate.objects.filter(run_id=run_id, completed_at__isnull=False)
    return set(answered.values_list("update_id", flat=True))


def complete_update(run_id: Any, update_id: str, result: Any) -> bool:
    """Record the answer to the update, once, with a `reply` audit row (the timeline's event of
    the answer): a replay's `wf.reply` finds it answered and writes nothing. On PostgreSQL one
    statement, which also NOTIFYs the update's caller (it LISTENs on `answer_channel`)."""
    if on_postgresql():
        params = {
            "run_id": str(run_id),
            "update_id": update_id,
            "result": _json(result),
            "action": REPLY_ACTION,
            "now": timezone.now(),
            "channel_prefix": ANSWER_CHANNEL_PREFIX,
        }
        with connection.cursor() as cursor:
            cursor.execute(STATEMENTS["answer_update"], params)
            return cursor.fetchone() is not None
    with transaction.atomic():
        unanswered = WorkflowUpdate.objects.filter(
            run_id=run_id, update_id=update_id, completed_at__isnull=True
        )
        found = unanswered.values_list("name", flat=True).first()
        if found is None or not unanswered.update(result=result, completed_at=DatabaseNow()):
            return False
        WorkflowAuditEntry.objects.create(
            run_id=run_id, action=REPLY_ACTION, payload={"update": found, "update_id": update_id}
        )
    return True


def receive_channel(run_id: Any) -> str:
    """The channel a pass waiting in place at the run's `wf.receive` LISTENs on (PostgreSQL)."""
    return f"pikku_receive_{uuid.UUID(str(run_id)).hex}"


def answer_channel(update_pk: int) -> str:
    """The channel the answer to update row `update_pk` is announced on (PostgreSQL)."""
    return f"{ANSWER_CHANNEL_PREFIX}{update_pk}"


def _json(value: Any) -> str | None:
    """A JSON column's parameter: None is SQL NULL, as the ORM stores it."""
    return None if value is None else json.dumps(value)
