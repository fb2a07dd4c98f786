"""`counts/` from the stored run counts (models/run_counts.py), when what it counts is a set of
their keys: the user sees every run (the view permission, no RUN_QUERYSET_FILTER) and the
filters name only statuses, workflows and levels. A few rows are read, not an index entry per
run. Any other filter (a time window, a starter, a wait...) leaves the count to the runs."""

from __future__ import annotations

from typing import Any

from ..models.run_counts import current_run_counts
from ..querysets import RunLevel
from ..status import RunStatus
from .filters import RunListFilterSet

# The filters the stored counts answer (ordering orders nothing in a count).
STORED_FILTERS = frozenset({"status", "workflow", "level", "has_parent", "latest_only", "ordering"})
LEVELS = {RunLevel.TOP: {True}, RunLevel.CHILDREN: {False}, RunLevel.ALL: {True, False}}


def stored_counts(filterset: RunListFilterSet, group_by: list[str]) -> dict[str, Any] | None:
    """The answer of `counts/` for a valid `filterset`, or None when its filters need the runs
    counted. Groups as `COUNT(*) ... GROUP BY` gives them: none of 0, in `group_by` order."""
    given = {
        name: value
        for name, value in filterset.form.cleaned_data.items()
        if value not in (None, "", [])
    }
    if not set(given) <= STORED_FILTERS:
        return None
    statuses = set(given.get("status") or RunStatus.values)
    if given.get("latest_only"):
        statuses.discard(RunStatus.CONTINUED)
    workflows = set(given.get("workflow", []))
    top_levels = _top_levels(given)
    counted: dict[tuple[str, ...], int] = {}
    for (workflow, status, top_level), runs in current_run_counts().items():
        if (
            status in statuses
            and top_level in top_levels
            and (not workflows or workflow in workflows)
        ):
            group = tuple({"workflow": workflow, "status": status}[name] for name in group_by)
            counted[group] = counted.get(group, 0) + runs
    groups = [
        {**dict(zip(group_by, group, strict=True)), "count": runs}
        for group, runs in sorted(counted.items())
        if runs
    ]
    total = sum(counted.values())
    return {"total": total, "groups": groups if group_by else []}


def _top_levels(given: dict[str, Any]) -> set[bool]:
    """The levels counted, as RunListFilterSet selects them: `level`, else top-level runs
    unless `has_parent` names runs itself; `has_parent` narrows either."""
    level = given.get("level")
    if not level and "has_parent" not in given:
        level = RunLevel.TOP
    levels = set(LEVELS[RunLevel(level or RunLevel.ALL)])
    if "has_parent" in given:
        levels &= {not given["has_parent"]}
    return levels
