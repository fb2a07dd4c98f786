"""Versions in the admin: which version a run started on (and whether it is still the deployed
one), a graph run's graph as it ran, and a stored version's graph."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..engine.replay.versions import current_version, run_graph_definition
from ..exceptions import InvalidInput, VersionNotFound
from ..graph import parse_definition
from ..models import WorkflowRun, WorkflowStep, WorkflowVersion
from .display import EMPTY
from .graph_svg import node_activity, render_graph

SHORT_HASH = 12


def run_version(site: Any, run: WorkflowRun) -> SafeString | str:
    """`<hash> (graph) · current` or `· older: deployed is <hash>`, linked to its version row."""
    if not run.code_version:
        return EMPTY
    version = WorkflowVersion.objects.filter(name=run.workflow, graph_hash=run.code_version)
    version_pk = version.values_list("pk", flat=True).first()
    label = format_html("<code>{}</code>", run.code_version[:SHORT_HASH])
    if version_pk is not None:
        label = format_html('<a href="{}">{}</a>', _version_url(site, version_pk), label)
    kind = "graph" if run.graph_hash else "code"
    deployed = current_version(run.workflow)
    if deployed is None:
        state: SafeString | str = "not deployed here"
    elif deployed == run.code_version:
        state = "current"
    else:
        state = format_html(
            "older: deployed is <code>{}</code> ({})",
            deployed[:SHORT_HASH],
            "the run goes on from its stored definition"
            if run.graph_hash
            else "its history replays under the deployed code",
        )
    return format_html("{} ({}) · {}", label, kind, state)


def _version_url(site: Any, pk: Any) -> str:
    try:
        return reverse(f"{site.name}:pikku_workflows_workflowversion_change", args=[pk])
    except NoReverseMatch:
        return ""


def run_graph(run: WorkflowRun) -> SafeString | str:
    """The graph the run runs on, coloured by what it did so far."""
    if not run.graph_hash:
        return EMPTY
    try:
        definition = run_graph_definition(run)
    except (VersionNotFound, InvalidInput) as exc:
        return format_html('<span class="pikku-problem">{}</span>', exc.message)
    steps = WorkflowStep.objects.filter(run=run).values_list("step_key", "status", "branch_taken")
    activity = node_activity(definition, steps)
    return render_graph(definition, activity, title=f"{run.workflow} as this run ran it")


def version_graph(version: WorkflowVersion, *, max_width: int | None = None) -> SafeString | str:
    """A stored graph version's graph (nothing for a code version)."""
    if version.kind != WorkflowVersion.Kind.GRAPH or not version.definition:
        return EMPTY
    try:
        definition = parse_definition(version.definition, name=version.name)
    except InvalidInput as exc:
        return format_html('<span class="pikku-problem">{}</span>', exc.message)
    return render_graph(
        definition, title=f"{version.name} @ {version.graph_hash}", max_width=max_width
    )
