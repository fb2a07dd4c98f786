"""The purge plan read from the models' `_meta`: it follows every foreign key into the rows a
purge deletes (so a table added later is covered), and every key it follows is indexed (a purge
that scans a table per batch would take hours on a big one)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import ForeignKey

from pikku_workflows.engine.store.purge_rows import purge_plan
from pikku_workflows.models import (
    WorkflowApproval,
    WorkflowApprovalDecision,
    WorkflowAuditEntry,
    WorkflowRun,
    WorkflowSignal,
    WorkflowStep,
    WorkflowStepHistory,
)

pytestmark = pytest.mark.django_db


def _leading_index_columns(table: str) -> set[str]:
    """The first columns of the table's indexes that hold every row: a partial index cannot
    answer the foreign key's own check (rows naming a deleted row, by that key alone)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
        partial = _partial_indexes(cursor, table)
    return {
        found["columns"][0]
        for name, found in constraints.items()
        if found["columns"]
        and (found["index"] or found["unique"] or found["primary_key"])
        and name not in partial
    }


def _partial_indexes(cursor, table: str) -> set[str]:
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT index.relname FROM pg_index JOIN pg_class index ON index.oid = indexrelid"
            " WHERE indrelid = %s::regclass AND indpred IS NOT NULL",
            [connection.ops.quote_name(table)],
        )
    else:
        cursor.execute("SELECT name FROM pragma_index_list(%s) WHERE partial = 1", [table])
    return {name for (name,) in cursor.fetchall()}


def test_plan__every_foreign_key_a_purge_touches_is_indexed():
    plan = purge_plan()
    for reference in plan.references:
        table = reference.model._meta.db_table
        assert reference.field.column in _leading_index_columns(table), str(reference)


def test_plan__follows_every_foreign_key_into_a_table_it_deletes_from():
    plan = purge_plan()
    every_key = {
        f"{model._meta.label}.{field.name}"
        for model in apps.get_models()
        for field in model._meta.get_fields()
        if isinstance(field, ForeignKey) and field.related_model in plan.doomed
    }
    assert {str(reference) for reference in plan.references} == every_key


def test_plan__deletes_the_run_tables_children_first():
    plan = purge_plan()
    assert plan.doomed[0] is WorkflowRun
    assert set(plan.doomed) >= {
        WorkflowStep,
        WorkflowStepHistory,
        WorkflowApproval,
        WorkflowApprovalDecision,
        WorkflowSignal,
        WorkflowAuditEntry,
    }
    for reference in plan.cascades:
        assert plan.doomed.index(reference.target) < plan.doomed.index(reference.model)
    cleared = {str(reference) for reference in plan.clears}
    assert "pikku_workflows.WorkflowRun.forked_from" in cleared
