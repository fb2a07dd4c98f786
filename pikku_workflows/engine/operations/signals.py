"""`pw.send_signal`: an external event for a run. It is kept until a `wf.wait_for_signal` for
its name takes it (at once when one is waiting), audited as `signal`, and the run's pass is
enqueued after the commit when a wait took it. A signal to an ended run is refused
(`InvalidTransition`), to an unknown one `RunNotFound`: never silently dropped. A run keeps at
most `MAX_KEPT_SIGNALS` signals no wait has taken; one more is refused (`InvalidTransition`)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration
from ...exceptions import InvalidInput, InvalidTransition, RunNotFound
from ...models import WorkflowAuditEntry
from ...serialization import NotStorableJson, round_trip
from ...status import TERMINAL_RUN_STATUSES
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.claims import lock_run_for_signals_txn
from ..store.signal_rows import deliver_signals_txn, keep_signal_txn, kept_signal_count_txn
from .reads import get_run_status, run_pk
from .runs import checked_user


def send_signal(run_id: Any, name: str, payload: Any = None, *, by: Any = None) -> dict[str, Any]:
    """Send the signal `name` with `payload` (any JSON) to the run; returns its status summary."""
    pk = run_pk(run_id)
    checked_text(name, "A signal name", max_length=NAME_MAX_LENGTH)
    try:
        payload = round_trip(payload)
    except NotStorableJson as exc:
        raise InvalidInput(f"The payload of signal {name!r} is not storable JSON: {exc}") from exc
    by = checked_user(by, "by")
    with transaction.atomic():
        status = lock_run_for_signals_txn(pk)
        if status is None:
            raise RunNotFound(run_id)
        if status in TERMINAL_RUN_STATUSES:
            raise InvalidTransition(
                f"run {pk}",
                status,
                "signalled",
                message=f"Run {pk} is {status}: it takes no more signals ({name!r} refused).",
            )
        signal = keep_signal_txn(pk, name, payload, by)
        taken = {sent.pk: step for sent, step in deliver_signals_txn(pk)}
        step = taken.get(signal.pk)
        if step is None:
            _check_kept(pk, name, status)
        WorkflowAuditEntry.objects.create(
            run_id=pk,
            step=step,
            action="signal",
            user=by,
            payload={
                "signal": name,
                "signal_id": signal.pk,
                "taken_by_step": step.step_key if step is not None else None,
            },
        )
        if taken:
            enqueue_orchestration(pk)  # after the commit
    return get_run_status(pk)


def _check_kept(run_id: Any, name: str, status: str) -> None:
    """Refuse (rolling the signal back) one kept signal too many: a run that never waits must
    not collect payloads without bound."""
    limit = pikku_settings.MAX_KEPT_SIGNALS
    if kept_signal_count_txn(run_id) > limit:
        raise InvalidTransition(
            f"run {run_id}",
            status,
            "signalled",
            message=(
                f"Run {run_id} already keeps {limit} signals no wait has taken "
                f"(MAX_KEPT_SIGNALS): {name!r} refused."
            ),
        )
