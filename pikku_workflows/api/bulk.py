"""Bulk operations on the runs a filter selects: the admin's confirmation preview as data (which
runs are eligible, which not and why), then the operation on each eligible run, one by one.

The preview follows the engine's operation rules; the engine still decides each run (it may
have moved since the preview), and a refusal is reported as that run's outcome.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet

import pikku_workflows as pw

from ..models import WorkflowRun
from .engine_internals import OPERATION_RULES, Rule
from .errors import error_body

# The operations that take many runs at once (a fork takes one run and a step).
RULES: dict[str, Rule] = {action: rule for action, rule in OPERATION_RULES.items() if rule.bulk}
# Runs one request acts on, and ids one preview lists: a larger selection is narrowed first.
BULK_LIMIT = 1000


@dataclass
class Preview:
    rule: Rule
    eligible_count: int
    ineligible_count: int
    eligible: list[uuid.UUID]
    ineligible: list[dict[str, Any]]

    @property
    def truncated(self) -> bool:
        return self.eligible_count > len(self.eligible) or self.ineligible_count > len(
            self.ineligible
        )

    def as_data(self, *, dry_run: bool) -> dict[str, Any]:
        return {
            "operation": self.rule.action,
            "dry_run": dry_run,
            "eligible_count": self.eligible_count,
            "ineligible_count": self.ineligible_count,
            "eligible": [str(pk) for pk in self.eligible],
            "ineligible": self.ineligible,
            "truncated": self.truncated,
        }


def preview(runs: QuerySet[WorkflowRun], rule: Rule) -> Preview:
    """Sort the selected runs into eligible and not, oldest first: three queries."""
    by_status = dict(runs.order_by().values_list("status").annotate(Count("pk")))
    eligible_count = sum(n for status, n in by_status.items() if status in rule.sources)
    oldest_first = runs.order_by("created_at", "id")
    eligible = list(
        oldest_first.filter(status__in=rule.sources).values_list("pk", flat=True)[:BULK_LIMIT]
    )
    others = oldest_first.exclude(status__in=rule.sources).values_list("pk", "status")
    ineligible = [
        {"id": str(pk), "status": status, "reason": rule.ineligibility(status)}
        for pk, status in others[:BULK_LIMIT]
    ]
    return Preview(
        rule,
        eligible_count,
        sum(by_status.values()) - eligible_count,
        eligible,
        ineligible,
    )


def perform(plan: Preview, *, by: Any, reason: str, **flags: bool) -> dict[str, Any]:
    """Call the engine's operation (with its yes/no `flags`) on every eligible run; one refusal
    never stops the others."""
    if plan.eligible_count > BULK_LIMIT:
        raise pw.InvalidInput(
            f"{plan.eligible_count} runs are eligible; one request acts on at most {BULK_LIMIT}: "
            "narrow the filters."
        )
    operation = plan.rule.function
    outcomes = []
    for pk in plan.eligible:
        try:
            summary = operation(pk, reason=reason, by=by, **flags)
        except pw.WorkflowError as exc:
            outcomes.append(
                {"id": str(pk), "outcome": "failed", "status": None} | {"error": error_body(exc)}
            )
            continue
        outcomes.append(
            {"id": str(pk), "outcome": "done", "status": summary["status"], "error": None}
        )
    done = sum(1 for outcome in outcomes if outcome["outcome"] == "done")
    return plan.as_data(dry_run=False) | {
        "done_count": done,
        "failed_count": len(outcomes) - done,
        "outcomes": outcomes,
    }
