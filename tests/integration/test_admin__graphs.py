"""The admin for graph runs and versions: the run page draws the run's graph as server-rendered
SVG (nodes coloured by step status, taken branches bold, revisits and items counted, no script),
says which version the run started on, the versions list shows each version's graph, and the
run list filters runs that started on an older version, with counts per version."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

import pikku_workflows as pw
from pikku_workflows.models import WorkflowVersion
from pikku_workflows.registry import registry
from tests.admin_support import CHANGELIST, change_url, listed_ids
from tests.graph_runs import Calls, register_graph_functions

pytestmark = pytest.mark.django_db

BRANCHING = {
    "entry": "start",
    "nodes": {
        "start": {"function": "g.echo", "next": "a"},
        "a": {"function": "g.increment", "next": {"again": "b", "done": "route"}},
        "b": {"function": "g.echo", "next": "a"},
        "route": {
            "function": "g.pick",
            "input": {"branch": "vip"},
            "next": {"vip": "vip", "std": "std"},
        },
        "vip": {"function": "g.echo", "next": "each"},
        "std": {"function": "g.echo"},
        "each": {"function": "g.echo", "for_each": {"$ref": "trigger", "path": "items"}},
    },
}


@pytest.fixture
def calls() -> Calls:
    seen = Calls()
    register_graph_functions(seen)
    return seen


def svg_of(html: str) -> str:
    match = re.search(r'<svg [^>]*class="pikku-graph".*?</svg>', html, re.S)
    assert match is not None, "no svg on the page"
    return match.group(0)


def node_classes(svg: str) -> dict[str, str]:
    """Each node's status class, by node id."""
    return {
        node: status
        for status, node in re.findall(
            r'class="pikku-node pikku-node-([\w-]+)" data-node="([^"]+)"', svg
        )
    }


def test_run_page__draws_the_graph_coloured_by_what_the_run_did(admin_client, calls):
    pw.graph_workflow("admin.graph", BRANCHING)
    run_id = pw.start_workflow("admin.graph", {"n": 0, "until": 2, "items": [1, 2, 3]}, inline=True)

    content = admin_client.get(change_url(run_id)).content.decode()

    svg = svg_of(content)
    assert node_classes(svg) == {
        "start": "succeeded",
        "a": "succeeded",
        "b": "succeeded",
        "route": "succeeded",
        "vip": "succeeded",
        "std": "not-run",
        "each": "succeeded",
    }
    assert "2 visits" in svg  # a ran twice (a, a#1)
    assert "3/3" in svg  # every item of `each` succeeded
    # The taken branch is bold, the other one is not.
    taken = re.findall(
        r'<path class="pikku-edge pikku-edge-taken[^"]*" d="[^"]+" fill="none" stroke="[^"]+" stroke-width="([\d.]+)"',
        svg,
    )
    assert taken and all(float(width) > 2 for width in taken)
    labels = dict(re.findall(r'font-weight="(bold|normal)"[^>]*>(vip|std)</text>', svg))
    assert labels == {"bold": "vip", "normal": "std"}
    assert "<script" not in svg.lower()
    # No external JS: the page loads only the admin's own scripts, from this site.
    sources = re.findall(r'<script src="([^"]+)"', content)
    assert sources and all(src.startswith("/") and not src.startswith("//") for src in sources)
    assert "http" not in svg.replace("http://www.w3.org/2000/svg", "")  # no external asset


def test_run_page__a_code_run_has_no_graph_and_shows_its_version(admin_client, calls):
    @pw.workflow("admin.code")
    def code(wf, input):
        return None

    run_id = pw.start_workflow("admin.code", {}, inline=True)

    content = admin_client.get(change_url(run_id)).content.decode()

    assert 'field-graph"' not in content
    version = registry.get_workflow("admin.code").code_version
    assert f"<code>{version[:12]}</code>" in content
    assert "(code) · current" in content


def test_run_page__a_run_on_an_older_version_says_so(admin_client, calls):
    pw.graph_workflow("admin.graph", BRANCHING)
    run_id = pw.start_workflow("admin.graph", {"n": 0, "until": 1, "items": []}, inline=True)
    registry.workflows.pop("admin.graph")
    newer = pw.graph_workflow("admin.graph", {**BRANCHING, "description": "v2"})

    content = admin_client.get(change_url(run_id)).content.decode()

    assert f"older: deployed is <code>{newer.hash[:12]}</code>" in content
    assert "goes on from its stored definition" in content
    version = WorkflowVersion.objects.get(name="admin.graph")
    assert reverse("admin:pikku_workflows_workflowversion_change", args=[version.pk]) in content
    assert svg_of(content)  # drawn from the stored definition


def test_versions_list__shows_each_graph_version_and_its_runs(admin_client, calls):
    pw.graph_workflow("admin.graph", BRANCHING)
    pw.start_workflow("admin.graph", {"n": 0, "until": 1, "items": []})
    pw.start_workflow("admin.graph", {"n": 0, "until": 1, "items": []})

    content = admin_client.get(
        reverse("admin:pikku_workflows_workflowversion_changelist")
    ).content.decode()

    assert content.count('class="pikku-graph"') == 1  # the graph version only
    assert 'style="max-width: 280px; height: auto"' in content
    assert "?version=admin.graph%40" in content
    version = WorkflowVersion.objects.get(name="admin.graph")
    page = admin_client.get(
        reverse("admin:pikku_workflows_workflowversion_change", args=[version.pk])
    )
    assert set(node_classes(svg_of(page.content.decode()))) == set(BRANCHING["nodes"])


def test_run_list__filters_runs_started_on_an_older_version_with_counts(admin_client, calls):
    pw.graph_workflow("admin.graph", BRANCHING)
    old = [pw.start_workflow("admin.graph", {"n": i}) for i in range(2)]
    registry.workflows.pop("admin.graph")
    pw.graph_workflow("admin.graph", {**BRANCHING, "description": "v2"})
    current = pw.start_workflow("admin.graph", {})
    old_hash = WorkflowVersion.objects.get(name="admin.graph", definition=BRANCHING).graph_hash

    response = admin_client.get(CHANGELIST)
    content = response.content.decode()
    assert "any older version (2)" in content
    assert f"admin.graph @ {old_hash[:12]} (2)" in content

    older = listed_ids(admin_client.get(CHANGELIST, {"version": "older"}))
    assert {str(pk) for pk in older} == set(old)
    by_version = listed_ids(admin_client.get(CHANGELIST, {"version": f"admin.graph@{old_hash}"}))
    assert {str(pk) for pk in by_version} == set(old)
    assert current not in {str(pk) for pk in older}
