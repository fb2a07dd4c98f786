"""`pw.send_signal`: an external event for a run. It is kept until a `wf.wait_for_signal` for
its name takes it (at once when one is waiting), audited as `signal`, and the run's pass is
enqueued after the commit when a wait took it. A signal to a continued run goes to the latest
run of its chain, where the signals no wait took went too (`wf.continue_as_new`). A signal to an
ended run is refused (`InvalidTransition`), to an unknown one `RunNotFound`: never silently
dropped. A run keeps at most `MAX_KEPT_SIGNALS` signals no wait has taken; one more is refused (`InvalidTransition`).

A signal sent on someone's behalf (`by=`) needs them to be the run's starter or to hold
`SIGNAL_PERMISSION`; a refusal is `SignalForbidden`, audited `deny` (docs/approvals-and-signals.md).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ...conf import pikku_settings
from ...dispatch import enqueue_orchestration
from ...exceptions import InvalidInput, InvalidTransition, SignalForbidden
from ...models import WorkflowAuditEntry, WorkflowRun
from ...serialization import NotStorableJson, round_trip
from ...status import TERMINAL_RUN_STATUSES, RunStatus
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.claims import lock_run_for_signals_txn
from ..store.continue_transitions import latest_in_chain
from ..store.signal_rows import deliver_signals_txn, keep_signal_txn, kept_signal_count_txn
from .reads import get_run_status, missing_run, run_pk
from .users import checked_user

# Who may send a signal to a run besides its starter (the model permission the admin grants).
SIGNAL_PERMISSION = "pikku_workflows.signal_workflowrun"


def send_signal(run_id: Any, name: str, payload: Any = None, *, by: Any = None) -> dict[str, Any]:
    """Send the signal `name` with `payload` (any JSON) to the run; returns its status summary.

    `by` is who sends it: the run's starter or a holder of `signal_workflowrun`, else
    `SignalForbidden`. Without `by` (your own code: a webhook's view, a step) nobody is checked.
    """
    pk = run_pk(run_id)
    checked_text(name, "A signal name", max_length=NAME_MAX_LENGTH)
    try:
        payload = round_trip(payload)
    except NotStorableJson as exc:
        raise InvalidInput(f"The payload of signal {name!r} is not storable JSON: {exc}") from exc
    by = checked_user(by, "by")
    if by is not None:
        check_may_signal(pk, name, by)
    with transaction.atomic():
        pk, status = lock_latest_run_txn(pk)
        if status is None:
            raise missing_run(run_id)
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


def lock_latest_run_txn(pk: Any) -> tuple[Any, str | None]:
    """The run that takes a signal sent to `pk`, locked, and its status: `pk` itself, or for a
    continued run its latest successor (a signal never falls between two links of a chain: a
    hand-over locks the run it ends first, so the latest run found locked and not continued
    stays the latest until this transaction ends)."""
    status = lock_run_for_signals_txn(pk)
    while status == RunStatus.CONTINUED:
        pk = latest_in_chain(pk)
        status = lock_run_for_signals_txn(pk)
    return pk, status


def may_signal(user: Any, started_by_id: Any) -> bool:
    """Whether `user` may send signals to a run `started_by_id` started."""
    if not user.is_active:
        return False
    return bool(user.pk == started_by_id or user.has_perm(SIGNAL_PERMISSION))


def check_may_signal(pk: Any, name: str, by: Any) -> None:
    """Refuse (`SignalForbidden`) a sender who may not signal the run, with a committed `deny`
    audit row, as a refused approval decision is recorded."""
    run = WorkflowRun.objects.filter(pk=pk).values_list("started_by_id").first()
    if run is None:
        raise missing_run(pk)
    if may_signal(by, run[0]):
        return
    why = (
        f"{by.get_username()} neither started run {pk} nor holds the permission {SIGNAL_PERMISSION}"
    )
    WorkflowAuditEntry.objects.create(
        run_id=pk,
        action="deny",
        user=by,
        reason=why,
        payload={"operation": "signal", "signal": name},
    )
    raise SignalForbidden(why, run_id=pk)


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
