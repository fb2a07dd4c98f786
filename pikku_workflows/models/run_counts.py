"""Runs counted by workflow, status and level, kept by the database as runs come, move and go,
so `GET metrics/` and the API's `counts/` read a few rows instead of an index entry per run."""

from __future__ import annotations

from django.db import models
from django.db.models import Sum

from ..validation import NAME_MAX_LENGTH

# (workflow, status, top-level) -> runs
RunCounts = dict[tuple[str, str, bool], int]


class WorkflowRunCount(models.Model):
    """How many runs have `workflow`, `status` and level (`top_level`: no parent run) as of the
    last fold (a recovery pass); the changes since are rows of WorkflowRunCountChange."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.CharField(max_length=NAME_MAX_LENGTH)
    status = models.CharField(max_length=16)
    top_level = models.BooleanField()
    runs = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "status", "top_level"], name="pikku_run_count_key"
            )
        ]

    def __str__(self) -> str:
        level = "top-level" if self.top_level else "child"
        return f"{self.runs} {level} {self.status} run(s) of {self.workflow}"


class WorkflowRunCountChange(models.Model):
    """A change of `runs` to one count, appended by the run table's triggers in the statement
    that inserts, moves or deletes runs. No key and no index but its id: concurrent writers
    append side by side and never wait on each other; a recovery pass folds the changes into
    WorkflowRunCount in one short statement."""

    id = models.BigAutoField(primary_key=True)
    workflow = models.CharField(max_length=NAME_MAX_LENGTH)
    status = models.CharField(max_length=16)
    top_level = models.BooleanField()
    runs = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.runs:+} to {self.workflow} {self.status}"


def current_run_counts() -> RunCounts:
    """Every count as of now: the folded counts plus the changes not folded yet (one query of
    a few rows); counts of 0 left out."""
    counts: RunCounts = {}
    folded = WorkflowRunCount.objects.values_list("workflow", "status", "top_level", "runs")
    unfolded = (
        WorkflowRunCountChange.objects.order_by()
        .values_list("workflow", "status", "top_level")
        .annotate(Sum("runs"))
    )
    for workflow, status, top_level, runs in folded.union(unfolded, all=True):
        key = (workflow, status, top_level)
        counts[key] = counts.get(key, 0) + int(runs)  # SUM of bigints is a numeric
    return {key: runs for key, runs in counts.items() if runs}
