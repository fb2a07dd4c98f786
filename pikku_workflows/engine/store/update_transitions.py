"""Updates in the tables (`pw.update`): accepted as a row and sent to the run as a signal of the
engine's own name (so `wf.receive` takes them in order, each once, and a hand-over moves them
with the other signals), then completed once by `wf.reply`: audited as `reply` and, on
PostgreSQL, announced with a NOTIFY on the update's own channel, which its caller LISTENs on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import connection, transaction

from ...models import WorkflowAuditEntry, WorkflowUpdate
from ...querysets import DatabaseNow
from ...sql import Statements
from .signal_rows import keep_signal_txn
from .transitions import on_postgresql

STATEMENTS = Statements(Path(__file__).with_name("update_transitions.sql"), names=dict)

# Signals of this prefix carry updates: `:` is no part of a name `pw.update` accepts.
UPDATE_SIGNAL_PREFIX = "update:"


def update_signal_name(name: str) -> str:
    return f"{UPDATE_SIGNAL_PREFIX}{name}"


def existing_update_txn(run_ids: list[Any], update_id: str) -> WorkflowUpdate | None:
    """Inside the run's lock: the update `update_id` already names on one of `run_ids`."""
    assert transaction.get_connection().in_atomic_block
    return WorkflowUpdate.objects.filter(run_id__in=run_ids, update_id=update_id).first()


def pending_update_count_txn(run_id: Any) -> int:
    """Inside the run's lock: how many of its updates no `wf.reply` answered yet."""
    assert transaction.get_connection().in_atomic_block
    return WorkflowUpdate.objects.filter(run_id=run_id, completed_at__isnull=True).count()


def accept_update_txn(
    run_id: Any, name: str, update_id: str, payload: Any, by: Any
) -> WorkflowUpdate:
    """Inside the run's lock: keep the update and hand it to a `wf.receive` waiting for it."""
    assert transaction.get_connection().in_atomic_block
    update = WorkflowUpdate.objects.create(
        run_id=run_id, name=name, update_id=update_id, payload=payload, sent_by=by
    )
    message = {
        "id": update_id,
        "name": name,
        "payload": payload,
        "by": by.get_username() if by is not None else None,
    }
    update.signal = keep_signal_txn(run_id, update_signal_name(name), message, by)
    update.save(update_fields=["signal"])
    return update


def answered_update_ids(run_id: Any) -> set[str]:
    """The update ids of the run's answered updates."""
    answered = WorkflowUpdate.objects.filter(run_id=run_id, completed_at__isnull=False)
    return set(answered.values_list("update_id", flat=True))


def complete_update(run_id: Any, update_id: str, result: Any) -> bool:
    """Record the answer to the update, once, with a `reply` audit row (the timeline's event of
    the answer): a replay's `wf.reply` finds it answered and writes nothing."""
    with transaction.atomic():
        unanswered = WorkflowUpdate.objects.filter(
            run_id=run_id, update_id=update_id, completed_at__isnull=True
        )
        found = unanswered.values_list("pk", "name").first()
        if found is None or not unanswered.update(result=result, completed_at=DatabaseNow()):
            return False
        pk, name = found
        WorkflowAuditEntry.objects.create(
            run_id=run_id, action="reply", payload={"update": name, "update_id": update_id}
        )
        if on_postgresql():
            with connection.cursor() as cursor:  # delivered to the caller when this commits
                cursor.execute(STATEMENTS["announce_answer"], {"channel": answer_channel(pk)})
    return True


def answer_channel(update_pk: int) -> str:
    """The channel the answer to update row `update_pk` is announced on (PostgreSQL)."""
    return f"pikku_update_{update_pk}"
