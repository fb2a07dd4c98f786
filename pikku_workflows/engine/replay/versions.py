"""Deploy safety: what a run goes on with once the code changed under it.

A graph run goes on from the definition it started on, stored in its `WorkflowVersion` (a stored
version gone: VERSION_NOT_FOUND). A code run replays under the new code for as long as every
recorded key asks for the same function (a changed fingerprint alone stops nothing); the first key
that asks for another fails the run with NON_DETERMINISTIC, or suspends it for an operator to
fork or cancel with `ON_NON_DETERMINISM = "suspend"`.
"""

from __future__ import annotations

from typing import Any

from ...conf import pikku_settings
from ...exceptions import VersionNotFound
from ...graph import GraphDefinition, parse_definition
from ...models import WorkflowRun, WorkflowVersion
from ...registry import registry
from ...status import RunStatus


def run_graph_definition(run: WorkflowRun) -> GraphDefinition:
    """The graph definition the run started on: the registered one while its hash is the run's
    (no query), else the stored version's; VersionNotFound when that is gone."""
    registered = registry.workflows.get(run.workflow)
    graph = registered.graph if registered is not None else None
    if graph is not None and graph.hash == run.graph_hash:
        return graph
    source = stored_definition(run.workflow, run.graph_hash)
    if source is None:
        raise VersionNotFound(run.workflow, run.graph_hash)
    return parse_definition(source, name=run.workflow)


def stored_definition(name: str, version: str) -> Any:
    """The definition stored with the version (a graph's JSON), or None when none is stored."""
    return (
        WorkflowVersion.objects.filter(name=name, graph_hash=version)
        .values_list("definition", flat=True)
        .first()
    )


def current_version(name: str) -> str | None:
    """The version a run of `name` started now would record (None: not registered here)."""
    definition = registry.workflows.get(name)
    return definition.code_version if definition is not None else None


def status_on_non_determinism() -> str:
    """The run status a non-deterministic replay leads to (ON_NON_DETERMINISM). An unknown
    value fails the run, the safe reading; `manage.py check` reports it (E003)."""
    suspend = pikku_settings.ON_NON_DETERMINISM == "suspend"
    return RunStatus.SUSPENDED if suspend else RunStatus.FAILED
