from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

import pikku_workflows as pw
from pikku_workflows.checks import check_graph_workflows
from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.graph import parse_definition
from pikku_workflows.registry import (
    WORKFLOW_KIND_GRAPH,
    WorkflowDefinition,
    registry,
    validate_graph_functions,
)

DEFINITION = {
    "entry": "validate",
    "nodes": {
        "validate": {"function": "tests.graph.validate", "next": "welcome"},
        "welcome": {"function": "tests.graph.welcome"},
    },
}


def _register_step_functions(*names):
    for name in names:
        pw.step_function(name)(lambda data, ctx: data)


def test_graph_workflow__registers_a_graph_kind_with_its_hash():
    graph = pw.graph_workflow("tests.onboarding", DEFINITION)

    definition = registry.get_workflow("tests.onboarding")
    assert definition.kind == WORKFLOW_KIND_GRAPH == "graph"
    assert definition.graph is graph
    assert definition.code_version == graph.hash == parse_definition(DEFINITION).hash
    assert definition.planned_steps is None


def test_graph_workflow__invalid_structure_is_rejected_and_nothing_registered():
    broken = {"entry": "a", "nodes": {"a": {"function": "f", "next": "ghost"}, "b": {}}}

    with pytest.raises(InvalidInput) as caught:
        pw.graph_workflow("tests.broken", broken)

    assert len(caught.value.problems) == 3
    assert "Graph workflow 'tests.broken' is invalid" in str(caught.value)
    assert not registry.is_workflow("tests.broken")


def test_graph_workflow__step_functions_may_register_later():
    pw.graph_workflow("tests.later", DEFINITION)

    with pytest.raises(InvalidInput) as caught:
        validate_graph_functions(
            registry.get_workflow("tests.later").graph, registry, "tests.later"
        )
    assert caught.value.problems == [
        "node 'validate': unknown step function 'tests.graph.validate'",
        "node 'welcome': unknown step function 'tests.graph.welcome'",
    ]

    _register_step_functions("tests.graph.validate", "tests.graph.welcome")
    validate_graph_functions(registry.get_workflow("tests.later").graph, registry)


def test_validate_graph_functions__a_workflow_name_is_a_child_run():
    _register_step_functions("tests.graph.validate")
    pw.workflow("tests.graph.welcome")(lambda wf, input: input)

    validate_graph_functions(parse_definition(DEFINITION), registry)


def test_graph_workflow__registering_the_same_graph_again_is_fine():
    pw.graph_workflow("tests.again", DEFINITION)
    pw.graph_workflow("tests.again", json.loads(json.dumps(DEFINITION)))

    assert registry.get_workflow("tests.again").code_version == parse_definition(DEFINITION).hash


def test_graph_workflow__another_graph_under_the_same_name_is_a_duplicate():
    pw.graph_workflow("tests.twice", DEFINITION)
    changed = {**DEFINITION, "nodes": {**DEFINITION["nodes"], "welcome": {"function": "x"}}}

    with pytest.raises(
        InvalidInput, match=r"Duplicate workflow name 'tests\.twice'.*graph definition"
    ):
        pw.graph_workflow("tests.twice", changed)


def test_graph_workflow__name_of_a_code_workflow_is_a_duplicate():
    @pw.workflow("tests.taken")
    def body(wf, input):
        return input

    pw.graph_workflow("tests.graph_first", DEFINITION)

    with pytest.raises(InvalidInput, match="Duplicate workflow name"):
        pw.graph_workflow("tests.taken", DEFINITION)
    with pytest.raises(InvalidInput, match="Duplicate workflow name"):
        pw.workflow("tests.graph_first")(body)
    assert registry.get_workflow("tests.taken").func is body
    assert registry.get_workflow("tests.graph_first").kind == "graph"


def test_graph_workflow__name_of_a_step_function_is_rejected():
    _register_step_functions("tests.graph.validate")

    with pytest.raises(InvalidInput, match="already registered as a step function"):
        pw.graph_workflow("tests.graph.validate", DEFINITION)


@pytest.mark.parametrize("name", ["", None, 5])
def test_graph_workflow__invalid_name_is_rejected(name):
    with pytest.raises(InvalidInput):
        pw.graph_workflow(name, DEFINITION)


def test_graph_workflow__has_no_body_to_run():
    pw.graph_workflow("tests.nobody", DEFINITION)
    body = registry.get_workflow("tests.nobody").func

    with pytest.raises(InvalidInput, match="graph planner"):
        body(SimpleNamespace(name="tests.nobody"), {})


def test_graph_workflow_from_file__named_by_the_file(tmp_path):
    path = tmp_path / "whatever.json"
    path.write_text(json.dumps({"name": "tests.from_file", **DEFINITION}))

    graph = pw.graph_workflow_from_file(path)

    assert registry.get_workflow("tests.from_file").graph is graph
    assert graph.hash == parse_definition(DEFINITION).hash


def test_graph_workflow_from_file__named_by_the_stem_or_the_argument(tmp_path):
    path = tmp_path / "tests_stem.json"
    path.write_text(json.dumps(DEFINITION))

    pw.graph_workflow_from_file(path)
    pw.graph_workflow_from_file(path, name="tests.explicit")

    assert registry.get_workflow("tests_stem").kind == "graph"
    assert registry.get_workflow("tests.explicit").kind == "graph"


def test_graph_workflow_from_file__invalid_file_registers_nothing(tmp_path):
    path = tmp_path / "tests_bad.json"
    path.write_text(json.dumps({"entry": "a", "nodes": {"a": {"function": 1}}}))

    with pytest.raises(InvalidInput, match="Graph workflow 'tests_bad' is invalid"):
        pw.graph_workflow_from_file(path)
    assert not registry.is_workflow("tests_bad")


def test_public_api__exports_the_graph_functions():
    assert {"graph_workflow", "graph_workflow_from_file"} <= set(pw.__all__)


# --- system check ------------------------------------------------------------------------


def _graph_errors():
    return [m for m in check_graph_workflows() if m.obj and "tests." in m.obj]


def test_check_graph_workflows__unknown_functions_are_one_error_each():
    pw.graph_workflow("tests.unchecked", DEFINITION)

    errors = _graph_errors()

    assert [(e.id, e.msg) for e in errors] == [
        ("pikku_workflows.E002", "node 'validate': unknown step function 'tests.graph.validate'"),
        ("pikku_workflows.E002", "node 'welcome': unknown step function 'tests.graph.welcome'"),
    ]
    assert all(e.obj == "graph workflow 'tests.unchecked'" and e.is_serious() for e in errors)
    assert "PIKKU_WORKFLOWS['MODULES']" in errors[0].hint


def test_manage_py_check__fails_on_a_graph_naming_an_unknown_function():
    pw.graph_workflow("tests.unchecked", DEFINITION)

    with pytest.raises(SystemCheckError) as refused:
        call_command("check")

    assert "pikku_workflows.E002" in str(refused.value)
    assert "unknown step function 'tests.graph.validate'" in str(refused.value)


def test_check_graph_workflows__clean_once_the_functions_exist():
    _register_step_functions("tests.graph.validate", "tests.graph.welcome")
    pw.graph_workflow("tests.clean", DEFINITION)

    assert _graph_errors() == []


def test_check_graph_workflows__structure_problems_are_e001():
    # Registration validates the structure; a definition put in the registry by other means
    # is checked all the same.
    graph = parse_definition(DEFINITION)
    island = {**graph.source["nodes"], "island": {"function": "tests.graph.welcome"}}
    sneaked = dataclasses.replace(graph, source={**graph.source, "nodes": island})
    registry.workflows["tests.sneaked"] = WorkflowDefinition(
        "tests.sneaked", lambda wf, input: None, None, "graph", sneaked.hash, sneaked
    )
    _register_step_functions("tests.graph.validate", "tests.graph.welcome")

    errors = _graph_errors()

    assert [(e.id, e.msg) for e in errors] == [
        (
            "pikku_workflows.E001",
            "node 'island' is unreachable: no entry leads to it through next or on_error",
        )
    ]


def test_check_graph_workflows__ignores_code_workflows():
    pw.workflow("tests.code")(lambda wf, input: input)

    assert _graph_errors() == []


def _chain(nodes: int) -> dict:
    graph = {f"n{i}": {"function": "f", "next": f"n{i + 1}"} for i in range(nodes - 1)}
    return {"entry": "n0", "nodes": {**graph, f"n{nodes - 1}": {"function": "f"}}}


def test_graph_workflow__more_nodes_than_graph_max_nodes_is_invalid_input():
    with pytest.raises(InvalidInput, match=r"5001 nodes; at most 5000 \(GRAPH_MAX_NODES\)"):
        pw.graph_workflow("tests.too_big", _chain(5001))

    assert "tests.too_big" not in registry.workflows


def test_graph_workflow__graph_max_nodes_is_a_setting(settings):
    settings.PIKKU_WORKFLOWS = {"GRAPH_MAX_NODES": 3}

    pw.graph_workflow("tests.three", _chain(3))
    with pytest.raises(InvalidInput, match="GRAPH_MAX_NODES"):
        pw.graph_workflow("tests.four", _chain(4))


def test_graph_workflow__a_stored_definition_over_the_cap_still_parses(settings):
    # A definition registered under a higher cap stays readable for the runs that started on it.
    settings.PIKKU_WORKFLOWS = {"GRAPH_MAX_NODES": 3}

    assert len(parse_definition(_chain(4)).nodes) == 4
