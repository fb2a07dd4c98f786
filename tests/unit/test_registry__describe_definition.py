"""`describe_definition`: what `GET definitions/{name}/` answers (pure: no database)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.registry import describe_definition, registry

V1 = {"entry": "a", "nodes": {"a": {"function": "g.echo"}}}


def test_describe_definition__gives_the_definition_and_its_hash():
    graph = pw.graph_workflow("graph.versioned", V1)

    @pw.workflow("graph.code", planned_steps=["x"])
    def code(wf, input):
        return None

    assert describe_definition("graph.versioned") == {
        "name": "graph.versioned",
        "kind": "graph",
        "version": graph.hash,
        "definition": V1,
        "planned_steps": None,
    }
    described = describe_definition("graph.code")
    assert (described["kind"], described["definition"], described["planned_steps"]) == (
        "dsl",
        None,
        ["x"],
    )
    assert described["version"] == registry.get_workflow("graph.code").code_version
    with pytest.raises(pw.WorkflowNotFound):
        describe_definition("graph.missing")
