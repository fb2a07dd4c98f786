"""What a live run can wait on (the run summary's `waiting_on.kind`): each kind's name, its words
for an operator, and the fields its `waiting_on` carries. The runs waiting each way are
`querysets.WAITING_KINDS`; the summary names the newest step in flight (`reads.waiting_on`)."""

from __future__ import annotations

from django.db.models import TextChoices


class WaitingKind(TextChoices):
    """The kinds in the order the admin's filter and the API's enum list them; the label is the
    admin filter's words. Every kind but `suspend`, `pass` and `admission` names a step
    (`step_key`)."""

    STEP = "step", "a step (queued or running)"
    TIMER = "timer", "a timer (sleep)"
    RETRY = "retry", "a retry backoff"
    CHILD = "child", "a child run"
    LEASE = "lease", "a step whose worker went silent"
    APPROVAL = "approval", "an approval"
    SIGNAL = "signal", "a signal"
    SUSPEND = "suspend", "an operator (suspended)"
    # Running with no step in flight: its next orchestrator pass is queued (or no worker took
    # its first one yet).
    PASS = "pass", "a worker (its next pass)"
    # A queued run: not yet admitted by its workflow's concurrency rule (docs/flow-control.md).
    ADMISSION = "admission", "admission (queued)"


# The fields each kind's `waiting_on` may carry beyond `kind` (and `step_key`, which every kind
# but `suspend`, `pass` and `admission` has): what the API's schema documents per field.
WAITING_FIELDS: dict[str, tuple[str, ...]] = {
    WaitingKind.STEP: ("lease_expires_at",),
    WaitingKind.TIMER: ("until",),
    WaitingKind.RETRY: ("attempt", "at", "until"),
    WaitingKind.CHILD: ("child_run_id",),
    WaitingKind.LEASE: ("lease_expires_at",),
    WaitingKind.APPROVAL: ("approval_id", "until"),
    WaitingKind.SIGNAL: ("signal", "until"),
    WaitingKind.SUSPEND: ("reason",),
    WaitingKind.PASS: (),
    WaitingKind.ADMISSION: ("reason", "key", "held_by", "until"),
}


class AdmissionReason(TextChoices):
    """What holds a queued run (`waiting_on.reason` of kind `admission`)."""

    CONCURRENCY = "concurrency", "its concurrency key is full"
    RATE = "rate", "a rate holds it"
    DEBOUNCE = "debounce", "its debounce window is open"
    OVERLAP = "overlap", "its schedule's run before is going"


# What every adapter (the admin, the `pikku` command) says of a run waiting on kind `pass`.
WAITING_FOR_A_WORKER = "waiting for a worker"


def waiting_for_a_worker(workers_seen: bool) -> str:
    """`waiting for a worker`, and `(none seen)` when no pikku_worker has been seen lately."""
    return WAITING_FOR_A_WORKER if workers_seen else f"{WAITING_FOR_A_WORKER} (none seen)"


def kinds_carrying(field: str) -> str:
    """The kinds whose `waiting_on` carries `field`, in words: "kind child", "kinds step, lease"."""
    kinds = [kind for kind in WaitingKind.values if field in WAITING_FIELDS[kind]]
    return f"{'kind' if len(kinds) == 1 else 'kinds'} {', '.join(kinds)}"
