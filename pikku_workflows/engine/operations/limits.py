"""Named limits as operators see and edit them: each limit's rate and max_running (the code's
default, or an operator's `WorkflowLimit` row), and its live usage (runs queued on it, when its next start may
begin)."""

from __future__ import annotations

import enum
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ...exceptions import InvalidInput, LimitNotFound
from ...flow import Limit, checked_max_running, parse_rate
from ...models import WorkflowLimit, WorkflowRate, WorkflowRun, WorkflowSlot
from ...querysets import DatabaseNow
from ...registry import registry
from ...status import RunStatus
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.limit_slots import limit_rule, set_running_bound_txn
from .users import checked_user


def list_limits() -> list[dict[str, Any]]:
    """Every limit defined in code or edited by an operator, by name."""
    edited = WorkflowLimit.objects.filter(managed_by=WorkflowLimit.ManagedBy.ADMIN)
    names = set(registry.limits) | set(edited.values_list("name", flat=True))
    return [get_limit(name) for name in sorted(names)]


def mirror_code_limits() -> None:
    """Write each limit defined in code that no operator edited as a `managed_by="code"` row,
    so the admin lists it beside the edited ones (the code's rate stays the one that applies)."""
    edited = WorkflowLimit.objects.filter(managed_by=WorkflowLimit.ManagedBy.ADMIN)
    taken = set(edited.values_list("name", flat=True))
    for limit in registry.limits.values():
        if limit.name not in taken:
            WorkflowLimit.objects.update_or_create(
                name=limit.name,
                defaults={
                    "rate": limit.rate_text or "",
                    "burst": limit.rate.burst if limit.rate else 0,
                    "managed_by": WorkflowLimit.ManagedBy.CODE,
                },
            )


def get_limit(name: str) -> dict[str, Any]:
    """`{name, rate, burst, max_running, managed_by, code: {rate, burst, max_running} | None,
    usage: {running, queued, next_start_at}}`; LimitNotFound for a name neither the code nor an
    operator defined. `max_running` is the one that applies: an operator's, else the code's."""
    checked_text(name, "A limit name", max_length=NAME_MAX_LENGTH)
    row = WorkflowLimit.objects.filter(name=name, managed_by=WorkflowLimit.ManagedBy.ADMIN).first()
    defined = registry.limits.get(name)
    if row is None and defined is None:
        raise LimitNotFound(name)
    code = _code_rate(defined)
    # A row with no rate (an edit of max_running alone) leaves the code's rate applying.
    if row is not None and (row.rate or code is None):
        rate, burst = row.rate or None, row.burst
    else:
        rate, burst = code["rate"], code["burst"]  # type: ignore[index]
    return {
        "name": name,
        "rate": rate,
        "burst": burst,
        "max_running": (row and row.max_running) or (defined and defined.max_running) or None,
        "managed_by": WorkflowLimit.ManagedBy.ADMIN if row else WorkflowLimit.ManagedBy.CODE,
        "code": code,
        "usage": _usage(name, rate, burst),
    }


class Unchanged(enum.Enum):
    """A setting `update_limit` leaves as it is (None means something: no bound)."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


def update_limit(
    name: str,
    *,
    rate: str | None = None,
    burst: int | None = None,
    max_running: int | Unchanged | None = UNCHANGED,
    by: Any = None,
) -> dict[str, Any]:
    """Set the limit's rate, burst and/or max_running at run time (a `WorkflowLimit` row that
    later deploys leave alone); InvalidInput for a bad value (nothing written), LimitNotFound
    for an unknown name.

    The next start is spaced by a new rate or burst from a clean slate (the times the old rate
    had promised ahead are forgotten); runs already queued keep the time they were given.
    `max_running` (None: the code's applies again) takes effect in the same transaction: a
    larger bound hands its new slots to the oldest waiting attempts, a smaller one evicts no
    one and admits no one until fewer attempts than it execute."""
    checked_user(by, "by")
    new_rate, new_burst, bounded = checked_limit_edit(
        name, rate=rate, burst=burst, max_running=max_running
    )
    with transaction.atomic():
        WorkflowLimit.objects.update_or_create(
            name=name,
            defaults={
                "rate": new_rate or "",
                "burst": new_burst,
                "managed_by": WorkflowLimit.ManagedBy.ADMIN,
            },
        )
        if rate is not None or burst is not None:
            WorkflowRate.objects.filter(limit_name=name).delete()
        if bounded is not None and not isinstance(max_running, Unchanged):
            set_running_bound_txn(bounded, max_running)
    return get_limit(name)


def checked_limit_edit(
    name: str, *, rate: str | None, burst: int | None, max_running: object
) -> tuple[str | None, int, Limit | None]:
    """What `update_limit` would write, checked first: the limit's new rate and burst (None:
    as they are), and the code's limit whose max_running the edit sets (None: it leaves it);
    InvalidInput for a bad value, LimitNotFound for an unknown name."""
    current = get_limit(name)
    new_rate = current["rate"] if rate is None else rate
    new_burst = current["burst"] if burst is None else burst
    # A limit with no rate (max_running alone) has its burst checked all the same.
    parse_rate(new_rate or "1/s", burst=new_burst, what=f"rate of limit {name!r}")
    return new_rate, new_burst, _bounded_limit(name, max_running)


def _bounded_limit(name: str, max_running: object) -> Limit | None:
    """The code's limit whose max_running an edit sets (None: the edit leaves it); InvalidInput
    for a bad value, or a bound on a limit the code gives none (its step attempts take no
    slots: the code decides which do)."""
    if max_running is UNCHANGED:
        return None
    checked_max_running(max_running, name)
    defined = registry.limits.get(name)
    if defined is None or defined.max_running is None:
        if max_running is None:
            return None
        raise InvalidInput(
            f"Limit {name!r} has no max_running in code, so none of its step attempts take a "
            "slot: give it one in pw.define_limit before an operator may change it."
        )
    return defined


def _code_rate(defined: Limit | None) -> dict[str, Any] | None:
    if defined is None:
        return None
    return {
        "rate": defined.rate_text,
        "burst": defined.rate.burst if defined.rate else 0,
        "max_running": defined.max_running,
    }


def _usage(name: str, rate: str | None, burst: int) -> dict[str, Any]:
    """Step attempts executing under the limit's max_running now, runs of the workflows naming
    the limit that a rate holds queued now, and when the next start may begin (None: at once)."""
    running = WorkflowSlot.objects.filter(rule=limit_rule(name)).count()
    if rate is None:
        return {"running": running, "queued": 0, "next_start_at": None}
    workflows = [d.name for d in registry.workflows.values() if name in d.limits]
    queued = WorkflowRun.objects.filter(
        Q(not_before__gt=DatabaseNow()), workflow__in=workflows, status=RunStatus.QUEUED
    ).count()
    tat = WorkflowRate.objects.filter(limit_name=name, key="").values_list("tat", flat=True).first()
    parsed = parse_rate(rate, burst=burst)
    next_start = None if tat is None else tat - timedelta(milliseconds=parsed.tolerance_ms)
    if next_start is not None and next_start <= timezone.now():
        next_start = None
    next_start_at = next_start.isoformat() if next_start else None
    return {"running": running, "queued": queued, "next_start_at": next_start_at}
