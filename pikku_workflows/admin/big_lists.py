"""Changelists of tables that grow without bound (runs): counted exactly up to
EXACT_COUNT_LIMIT rows and estimated past it, never a COUNT(*) of the whole table; filter facet
counts off (each would be a COUNT per filter choice)."""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet

# Up to this many rows a list is counted exactly (a COUNT over at most this many rows).
EXACT_COUNT_LIMIT = 10_000


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The planner's estimate of the rows `queryset` returns (PostgreSQL; None elsewhere)."""
    if connections[queryset.db].vendor != "postgresql":
        return None
    plan = json.loads(queryset.order_by().explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """`count` is exact up to EXACT_COUNT_LIMIT, the planner's estimate past it (or the limit
    plus one where there is no planner to ask); `estimated` says which."""

    @cached_property
    def count(self) -> int:
        runs: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        # Ids alone: the list's annotations (computed from JSON per row) count nothing.
        bounded = runs.order_by().values("pk")[: EXACT_COUNT_LIMIT + 1].count()
        if bounded <= EXACT_COUNT_LIMIT:
            return bounded
        self.estimated = True
        estimate = estimated_rows(runs)
        return max(estimate or 0, EXACT_COUNT_LIMIT + 1)

    estimated = False
