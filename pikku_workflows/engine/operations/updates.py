"""`pw.update`: a write that answers. The workflow's validator runs in the caller against the
run's input, state and the payload; a refusal (`UpdateRejected`) writes nothing. An accepted
update is a row, deduplicated by `update_id`, sent to the run as a signal `wf.receive` takes in
order, audited as `update` with who sent it; the caller waits for `wf.reply`'s answer, woken by
its NOTIFY on PostgreSQL, polling elsewhere (docs/long-lived-runs.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction

from ...conf import pikku_settings
from ...durations import parse_duration
from ...exceptions import (
    InvalidInput,
    InvalidTransition,
    RunNotFound,
    UpdateRejected,
    UpdateTimeout,
)
from ...models import WorkflowUpdate
from ...registry import registry
from ...serialization import NotStorableJson, round_trip
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH, checked_text
from ..store.claims import lock_run_for_signals_txn
from ..store.continue_transitions import chain_and_latest_run, chain_from
from ..store.notices import NOTICE_RECHECK_SECONDS, listening
from ..store.signal_rows import hand_over_signal_txn
from ..store.update_transitions import (
    announce_update_txn,
    answer_channel,
    keep_update_txn,
    update_signal_name,
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
    chain = _validate(pk, name, payload)
    accepted = _accept(chain, name, update_id, payload, by)
    if wait == "accepted":
        return update_id
    return _answer(accepted, update_id, seconds)


def _validate(pk: Any, name: str, payload: Any) -> list[Any]:
    """Run the workflow's validator for `name` against the latest run of the chain; returns the
    chain (`chain_from`)."""
    found = chain_and_latest_run(pk)
    if found is None:
        raise RunNotFound(pk)
    chain, latest = found
    definition = registry.workflows.get(latest["workflow"])
    validator = None if definition is None else definition.updates.get(name)
    if validator is None:
        raise InvalidInput(f"Workflow {latest['workflow']!r} takes no update {name!r}.")
    try:
        validator(latest["input"], latest["state"], payload)
    except UpdateRejected:
        raise
    except Exception as exc:
        # A bug in the validator: the caller gets its message, not a 500, and it is logged.
        logger.exception("pikku_workflows: the validator of update %r raised", name)
        raise UpdateRejected(f"The validator of update {name!r} failed: {exc}") from exc
    return chain


def _accept(chain: list[Any], name: str, update_id: str, payload: Any, by: Any) -> int:
    """The row of the update (the existing one for a repeated `update_id`). `chain`: the runs
    the validator found; one more link since (a hand-over meanwhile) is read again."""
    with transaction.atomic():
        latest, status = chain[-1], lock_run_for_signals_txn(chain[-1])
        if status == RunStatus.CONTINUED:
            latest, status = lock_latest_run_txn(latest)
            chain = chain_from(chain[0])
        if status is None:
            raise RunNotFound(chain[0])
        limit = pikku_settings.MAX_PENDING_UPDATES
        kept = keep_update_txn(
            chain,
            latest,
            open=status not in TERMINAL_RUN_STATUSES,
            limit=limit,
            name=name,
            update_id=update_id,
            payload=payload,
            by=by,
        )
        if kept.existing is not None:
            return kept.existing
        if kept.update is None and status in TERMINAL_RUN_STATUSES:
            raise InvalidTransition(
                f"run {latest}",
                status,
                "updated",
                message=f"Run {latest} is {status}: it takes no more updates ({name!r} refused).",
            )
        if kept.update is None:
            raise InvalidTransition(
                f"run {latest}",
                status,
                "updated",
                message=f"Run {latest} already holds {limit} "
                f"updates no reply answered (MAX_PENDING_UPDATES): {name!r} refused.",
            )
        handed = hand_over_signal_txn(latest, update_signal_name(name))
        ours = handed is not None and handed.signal == kept.signal
        audit = {
            "update": name,
            "update_id": update_id,
            "taken_by_step": handed.step_key if handed is not None and ours else None,
        }
        step = handed.step if handed is not None and ours else None
        announce_update_txn(latest, step, handed is not None, audit, by)
    return kept.update


def _answer(update_pk: int, update_id: str, seconds: float | None) -> Any:
    """Wait for the reply: on PostgreSQL woken by its NOTIFY (LISTEN first, then read the row,
    so an answer committed in between is read, not missed), elsewhere by a growing poll."""
    deadline = None if seconds is None else time.monotonic() + seconds
    delay = POLL_FIRST_SECONDS
    with listening(answer_channel(update_pk)) as wait_for_notice:
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
