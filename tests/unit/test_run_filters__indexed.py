"""Every filter of the run list (API, counts, bulk operations, admin) reads a column that leads
an index of the run table, so a filter on a million runs is an index scan; a new filter fails
here until its column is named (and indexed)."""

from __future__ import annotations

from pikku_workflows.api.filters import RunFilterSet
from pikku_workflows.models import WorkflowRun

# Each filter, the run column it reads. `q` is a search (an id prefix uses the primary key; a
# workflow name fragment scans), not a filter.
FILTER_COLUMNS = {
    "id": "id",
    "status": "status",
    "workflow": "workflow",
    "started_after": "created_at",
    "started_before": "created_at",
    "finished_after": "finished_at",
    "finished_before": "finished_at",
    "started_by": "started_by_id",
    "level": "parent_run_id",
    "parent_run": "parent_run_id",
    "has_parent": "parent_run_id",
    "subject_type": "subject_type_id",
    "subject_id": "subject_type_id",  # with subject_type: one index (type, id)
    "waiting_on": "waiting_on",
    "awaiting_approval": "waiting_on",
    "latest_only": "status",  # not continued: its own partial index pages the list besides
    "ordering": "created_at",
}
SEARCHES = {"q"}


def leading_columns() -> set[str]:
    meta = WorkflowRun._meta
    leading = {meta.pk.column}
    leading |= {meta.get_field(index.fields[0]).column for index in meta.indexes}
    for field in meta.concrete_fields:
        if field.db_index or field.unique:
            leading.add(field.column)
    return leading


def test_run_filters__every_filter_is_named_here():
    assert set(RunFilterSet.base_filters) == set(FILTER_COLUMNS) | SEARCHES


def test_run_filters__every_filter_reads_a_leading_index_column():
    unindexed = {name for name, column in FILTER_COLUMNS.items() if column not in leading_columns()}

    assert unindexed == set()
