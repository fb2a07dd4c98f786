"""Creating run rows and recording the workflow version they run."""

from __future__ import annotations

from typing import Any

from ..models import WorkflowRun, WorkflowVersion
from ..registry import registry
from ..status import RunStatus


def create_run_row(workflow: str, input: Any, *, inline: bool, **fields: Any) -> WorkflowRun:
    """Insert a running run of a registered workflow and upsert its version row."""
    definition = registry.get_workflow(workflow)
    # Versions are recorded when a run starts, never at import: ready() must not query.
    WorkflowVersion.objects.bulk_create(
        [
            WorkflowVersion(
                name=definition.name,
                graph_hash=definition.code_version,
                code_version=definition.code_version,
                kind=definition.kind,
                definition={"planned_steps": definition.planned_steps},
            )
        ],
        ignore_conflicts=True,
    )
    run = WorkflowRun(
        workflow=definition.name,
        status=RunStatus.RUNNING,
        input=input,
        inline=inline,
        code_version=definition.code_version,
        planned_steps=definition.planned_steps,
        **fields,
    )
    run.save(force_insert=True)
    return run
