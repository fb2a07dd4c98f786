"""Creating run rows and recording the workflow version they run."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..conf import pikku_settings
from ..models import WorkflowRun, WorkflowVersion
from ..registry import registry
from ..status import RunStatus
from . import fast_path
from .leases import run_lease_until
from .transitions import fast_path_available


def create_run_row(
    workflow: str, input: Any, *, inline: bool, lease_holder: str | None = None, **fields: Any
) -> WorkflowRun:
    """Insert a running run of a registered workflow and upsert its version row.

    With `lease_holder` the run is born leased to that holder (an inline start drives its first
    pass at once, without reading and leasing the row it has just written). On PostgreSQL this
    is one statement; elsewhere one short transaction.
    """
    definition = registry.get_workflow(workflow)
    # Versions are recorded when a run starts, never at import: ready() must not query.
    version = WorkflowVersion(
        name=definition.name,
        graph_hash=definition.code_version,
        code_version=definition.code_version,
        kind=definition.kind,
        definition={"planned_steps": definition.planned_steps},
    )
    run = WorkflowRun(
        workflow=definition.name,
        status=RunStatus.RUNNING,
        input=input,
        inline=inline,
        code_version=definition.code_version,
        planned_steps=definition.planned_steps,
        lease_holder=lease_holder,
        **fields,
    )
    lease_seconds = None if lease_holder is None else pikku_settings.RUN_LEASE_SECONDS
    if fast_path_available():
        fast_path.insert_run_with_version(run, version, lease_seconds)
        return run  # lease_expires_at stays unknown here: the database computed it
    with transaction.atomic():
        WorkflowVersion.objects.bulk_create([version], ignore_conflicts=True)
        if lease_holder is not None:
            run.lease_expires_at = run_lease_until()
        run.save(force_insert=True)
    run.lease_expires_at = None  # an expression the database evaluated, or never set
    return run
