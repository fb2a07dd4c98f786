"""Retention: purging ended runs (`purge_runs`; the timer loop's `purge_by_retention`).

A purge takes ended root runs whose `finished_at` is older than the cutoff, by the database
clock, in batches of short transactions: each batch holds the purger's lock (one purger at a
time), takes its runs' rows skipping any another transaction holds (a claim, an operator, a
fork: never waited for), drops the trees it may not purge (a run still going below, a pending
approval, a hold from `operations.holds`, a row it could not take), and deletes the rest with
every row naming them (`store.purge_rows`), leaving tombstones. A killed purge loses only its
open batch, which rolls back whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from ...conf import pikku_settings
from ...durations import parse_duration
from ...exceptions import InvalidInput
from ...models import WorkflowApproval, WorkflowRun, WorkflowRunTombstone
from ...querysets import database_ago
from ...registry import registry
from ...retention import (
    FIRST_BATCH,
    PURGEABLE_STATUSES,
    checked_statuses,
    next_batch_size,
    parse_retention,
)
from ...status import TERMINAL_RUN_STATUSES, ApprovalStatus
from ...validation import NAME_MAX_LENGTH, checked_text
from ..store.claims import (
    lock_child_runs_txn,
    lock_purgeable_runs_txn,
    lock_steps_of_runs_txn,
    take_purger_lock_txn,
)
from ..store.purge_rows import purge_rows_txn


@dataclass(frozen=True)
class Cutoff:
    """Runs of `statuses` that ended more than `older_than_ms` ago; of `workflow` only, or of
    every workflow but `except_workflows` when `workflow` is None."""

    statuses: tuple[str, ...]
    older_than_ms: int
    workflow: str | None = None
    except_workflows: frozenset[str] = frozenset()

    def runs(self) -> Q:
        ended = database_ago(self.older_than_ms / 1000)
        matching = Q(status__in=self.statuses, finished_at__lt=ended)
        if self.workflow is not None:
            return matching & Q(workflow=self.workflow)
        return matching & ~Q(workflow__in=self.except_workflows)


def purge_runs(
    *,
    older_than: Any = "30d",
    statuses: Iterable[str] = PURGEABLE_STATUSES,
    workflow: str | None = None,
    batch: int | None = None,
    max_seconds: float | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Delete ended root runs of `statuses` (and their whole trees) that ended more than
    `older_than` ago (a duration: "30d", ms, a timedelta), of `workflow` or of every workflow;
    at most `batch` runs per transaction (PURGE_BATCH; each batch sized to hold its locks about
    BATCH_TARGET_MS), for at most `max_seconds`; then the tombstones
    past TOMBSTONE_DAYS. `dry_run` deletes nothing and counts what would go.

    Returns `{"runs", "rows": {model name: n}, "batches", "skipped", "tombstones_expired",
    "busy", "more", "longest_batch_ms"}`: `skipped` trees were kept (held, still going, or a
    row another transaction held); `busy` is True when another purge held the purger's lock and
    this one stopped; `more` when `max_seconds` ran out first; `longest_batch_ms` is the longest
    any batch's transaction held its locks (what PURGE_BATCH trades against runs per second).
    """
    try:
        older_than_ms = parse_duration(older_than, what="older_than")
    except InvalidInput as exc:
        raise InvalidInput(f"older_than: {exc.message}") from exc
    cutoff = Cutoff(checked_statuses(statuses), older_than_ms, _checked_workflow(workflow))
    if not isinstance(dry_run, bool):
        raise InvalidInput("dry_run must be True or False.")
    return _purge([cutoff], _checked_batch(batch), _checked_seconds(max_seconds), dry_run)


def purge_by_retention(max_seconds: float | None = None) -> dict[str, Any] | None:
    """One purge by RETENTION and each workflow's `retention=` (the timer loop's), for at most
    `max_seconds`; None when neither keeps runs for a bounded time."""
    cutoffs = retention_cutoffs()
    if not cutoffs:
        return None
    return _purge(cutoffs, pikku_settings.PURGE_BATCH, max_seconds, dry_run=False)


def retention_cutoffs() -> list[Cutoff]:
    """A workflow's own `retention=` wins for the statuses it names; RETENTION keeps the rest."""
    setting = pikku_settings.RETENTION
    general = parse_retention(setting, what="RETENTION") if setting is not None else {}
    own = {name: d.retention for name, d in registry.workflows.items() if d.retention}
    cutoffs = [
        Cutoff((status,), ms, workflow=name)
        for name, retention in own.items()
        for status, ms in retention.items()
    ]
    for status, ms in general.items():
        overridden = frozenset(name for name, retention in own.items() if status in retention)
        cutoffs.append(Cutoff((status,), ms, except_workflows=overridden))
    return cutoffs


def _checked_workflow(workflow: Any) -> str | None:
    if workflow is None:
        return None
    checked_text(workflow, "workflow", max_length=NAME_MAX_LENGTH)
    known = workflow in registry.workflows or WorkflowRun.objects.filter(workflow=workflow).exists()
    if not known:
        raise InvalidInput(f"No workflow {workflow!r} is registered or has runs to purge.")
    return str(workflow)


def _checked_batch(batch: Any) -> int:
    if batch is None:
        return int(pikku_settings.PURGE_BATCH)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InvalidInput(f"batch is a number of runs, at least 1, not {batch!r}.")
    return batch


def _checked_seconds(max_seconds: Any) -> float | None:
    if max_seconds is None:
        return None
    valid = isinstance(max_seconds, int | float) and not isinstance(max_seconds, bool)
    if not valid or not max_seconds > 0:
        raise InvalidInput(f"max_seconds is a positive number of seconds, not {max_seconds!r}.")
    return float(max_seconds)


class _DryRun(Exception):
    """Rolls back a dry run's batch once it is counted."""


def _purge(
    cutoffs: list[Cutoff], batch: int, max_seconds: float | None, dry_run: bool
) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "runs": 0,
        "rows": {},
        "batches": 0,
        "skipped": 0,
        "busy": False,
        "more": False,
        "longest_batch_ms": 0.0,
    }
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    purgeable = Q()
    for cutoff in cutoffs:
        purgeable |= cutoff.runs()
    after: tuple[Any, Any] | None = None
    size = min(batch, FIRST_BATCH)
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            counts["more"] = True
            break
        began = time.monotonic()
        outcome = _purge_batch(purgeable, after, size, dry_run)
        batch_ms = (time.monotonic() - began) * 1000
        size = next_batch_size(size, batch_ms, batch)
        if outcome is None:
            counts["busy"] = True
            break
        after, taken, skipped, rows = outcome
        if not taken:
            break
        counts["batches"] += 1
        counts["longest_batch_ms"] = max(counts["longest_batch_ms"], batch_ms)
        counts["skipped"] += skipped
        counts["runs"] += rows.get("workflowrun", 0)
        for name, count in rows.items():
            counts["rows"][name] = counts["rows"].get(name, 0) + count
    counts["tombstones_expired"] = 0 if dry_run else _expire_tombstones(batch)
    return counts


def _purge_batch(
    purgeable: Q, after: tuple[Any, Any] | None, batch: int, dry_run: bool
) -> tuple[tuple[Any, Any] | None, int, int, dict[str, int]] | None:
    """One batch in one transaction: (where the next starts, roots taken, trees kept, rows
    deleted by model); None when another purge holds the purger's lock."""
    result = None
    try:
        with transaction.atomic():
            if not take_purger_lock_txn():
                return None
            roots = lock_purgeable_runs_txn(_roots(purgeable, after), batch)
            if not roots:
                return after, 0, 0, {}
            runs, kept = _purgeable_trees_txn(roots)
            rows = purge_rows_txn(runs) if runs else {}
            result = ((roots[-1]["finished_at"], roots[-1]["id"]), len(roots), kept, rows)
            if dry_run:
                raise _DryRun
    except _DryRun:
        pass
    return result


def _roots(purgeable: Q, after: tuple[Any, Any] | None) -> Any:
    roots = WorkflowRun.objects.filter(purgeable, parent_run__isnull=True, retention_hold=False)
    if after is not None:
        finished_at, pk = after
        roots = roots.filter(Q(finished_at__gt=finished_at) | Q(finished_at=finished_at, pk__gt=pk))
    return roots


def _purgeable_trees_txn(roots: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The runs of the trees under `roots` that may all go (every run of the tree ended, none
    held, no pending approval, every row taken), and how many trees were kept."""
    root_of = {row["id"]: row["id"] for row in roots}
    runs = list(roots)
    kept: set[Any] = set()
    level = [row["id"] for row in roots]
    while level:
        children, held_parents = lock_child_runs_txn(level)
        kept |= {root_of[parent] for parent in held_parents}
        for child in children:
            root_of[child["id"]] = root_of[child["parent_run_id"]]
            if child["status"] not in TERMINAL_RUN_STATUSES or child["retention_hold"]:
                kept.add(root_of[child["id"]])
        runs.extend(children)
        level = [child["id"] for child in children]
    pending = WorkflowApproval.objects.filter(
        run_id__in=list(root_of), status=ApprovalStatus.PENDING
    ).values_list("run_id", flat=True)
    kept |= {root_of[run_id] for run_id in pending}
    kept |= {root_of[run_id] for run_id in lock_steps_of_runs_txn(list(root_of))}
    return [row for row in runs if root_of[row["id"]] not in kept], len(kept)


def _expire_tombstones(batch: int) -> int:
    """Delete up to `batch` tombstones older than TOMBSTONE_DAYS (database clock)."""
    days = pikku_settings.TOMBSTONE_DAYS
    expired = WorkflowRunTombstone.objects.filter(
        purged_at__lt=database_ago(timedelta(days=days).total_seconds())
    )
    ids = list(expired.order_by("purged_at").values_list("pk", flat=True)[:batch])
    return WorkflowRunTombstone.objects.filter(pk__in=ids).delete()[0] if ids else 0
