"""Inserting run rows, with the workflow version they run (a graph's definition stored in it)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from ... import events
from ...conf import pikku_settings
from ...models import WorkflowRun, WorkflowVersion
from ...observability.tracing import caller_traceparent
from ...registry import registry
from ...sql import Statements
from ...status import RunStatus
from .leases import run_lease_until
from .tables import engine_names
from .transitions import on_postgresql

STATEMENTS = Statements(Path(__file__).with_name("run_rows.sql"), names=engine_names)


def create_run_row(
    workflow: str, input: Any, *, inline: bool, lease_holder: str | None = None, **fields: Any
) -> WorkflowRun:
    """Insert a running run of a registered workflow and upsert its version row.

    With `lease_holder` the run is born leased to that holder (an inline start drives its first
    pass at once, without reading and leasing the row it has just written). On PostgreSQL this
    is one statement; elsewhere one short transaction. The run's `lease_expires_at` is left
    unknown in memory: the database computed it.
    """
    definition = registry.get_workflow(workflow)
    # Versions are recorded when a run starts, never at import: ready() must not query. A graph
    # run goes on from its stored definition whatever is registered later (engine/replay/versions.py).
    graph = definition.graph
    version = WorkflowVersion(
        name=definition.name,
        graph_hash=definition.code_version,
        code_version=definition.code_version,
        kind=definition.kind,
        definition=graph.source if graph else {"planned_steps": definition.planned_steps},
    )
    run = WorkflowRun(
        workflow=definition.name,
        status=RunStatus.RUNNING,
        input=input,
        inline=inline,
        graph_hash=graph.hash if graph else "",
        code_version=definition.code_version,
        planned_steps=definition.planned_steps,
        lease_holder=lease_holder,
        random_seed=secrets.randbits(63),
        **{"traceparent": caller_traceparent(), **fields},
    )
    lease_seconds = None if lease_holder is None else pikku_settings.RUN_LEASE_SECONDS
    if on_postgresql():
        _insert_in_one_statement(run, version, lease_seconds)
    else:
        with transaction.atomic():
            WorkflowVersion.objects.bulk_create([version], ignore_conflicts=True)
            if lease_holder is not None:
                run.lease_expires_at = run_lease_until()
            run.save(force_insert=True)
    run.lease_expires_at = None
    events.announce_run_started(run)
    return run


def _insert_in_one_statement(
    run: WorkflowRun, version: WorkflowVersion, lease_seconds: float | None
) -> None:
    params = {**_column_values(run), "lease_seconds": lease_seconds}
    params |= {f"version_{name}": value for name, value in _column_values(version).items()}
    with connection.cursor() as cursor:
        cursor.execute(STATEMENTS["insert_run"], params)
    run._state.adding, run._state.db = False, connection.alias  # as `save()` leaves it


def _column_values(instance: Any) -> dict[str, Any]:
    """Each concrete column's value as the ORM would write it (`pre_save` stamps times)."""
    return {
        field.column: field.get_db_prep_save(field.pre_save(instance, add=True), connection)
        for field in instance._meta.concrete_fields
    }
