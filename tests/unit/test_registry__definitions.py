from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import pikku_workflows as pw
from pikku_workflows.exceptions import InvalidInput, StepFunctionNotFound, WorkflowNotFound
from pikku_workflows.registry import (
    WORKFLOW_KIND_DSL,
    code_fingerprint,
    registry,
    validate_step_key,
)


def _make_step_function():
    # Each call returns a new function object with the same module and qualname, like a
    # module imported twice under two names.
    def charge(data, ctx):
        return data

    return charge


def test_workflow__decorator_registers_and_returns_the_function():
    def body(wf, input):
        return input

    decorated = pw.workflow("tests.registers", planned_steps=["a", "b"])(body)

    assert decorated is body
    definition = registry.get_workflow("tests.registers")
    assert definition.func is body
    assert definition.planned_steps == ["a", "b"]
    assert definition.kind == WORKFLOW_KIND_DSL
    assert definition.code_version == code_fingerprint(body)
    assert registry.is_workflow("tests.registers")


def test_workflow__planned_steps_default_to_none():
    @pw.workflow("tests.no_plan")
    def body(wf, input):
        return None

    assert registry.get_workflow("tests.no_plan").planned_steps is None


def test_step_function__decorator_registers_with_options():
    @pw.step_function("tests.queued", inline=False, queue="slow", timeout="30s")
    def queued(data, ctx):
        return data

    @pw.step_function("tests.inline")
    def inline(data, ctx):
        return data

    definition = registry.get_step_function("tests.queued")
    assert definition.func is queued
    assert (definition.inline, definition.queue, definition.timeout_ms) == (False, "slow", 30_000)
    default = registry.get_step_function("tests.inline")
    assert (default.inline, default.queue, default.timeout_ms) == (True, None, None)
    assert not registry.is_workflow("tests.inline")


def test_workflow__duplicate_name_from_another_function_rejected():
    @pw.workflow("tests.duplicate")
    def first(wf, input):
        return 1

    def second(wf, input):
        return 2

    with pytest.raises(InvalidInput, match="Duplicate workflow name"):
        pw.workflow("tests.duplicate")(second)
    assert registry.get_workflow("tests.duplicate").func is first


def test_step_function__duplicate_name_from_another_function_rejected():
    @pw.step_function("tests.duplicate_step")
    def first(data, ctx):
        return 1

    def second(data, ctx):
        return 2

    with pytest.raises(InvalidInput, match="Duplicate step function name"):
        pw.step_function("tests.duplicate_step")(second)
    assert registry.get_step_function("tests.duplicate_step").func is first


def test_workflow__registering_the_same_function_again_is_fine():
    def body(wf, input):
        return input

    pw.workflow("tests.again")(body)
    pw.workflow("tests.again")(body)

    assert registry.get_workflow("tests.again").func is body


def test_step_function__same_function_reimported_is_fine():
    first, reimported = _make_step_function(), _make_step_function()
    assert first is not reimported

    pw.step_function("tests.reimported")(first)
    pw.step_function("tests.reimported")(reimported)

    assert registry.get_step_function("tests.reimported").func is reimported


def test_workflow__name_of_a_step_function_rejected():
    @pw.step_function("tests.shared_name")
    def step(data, ctx):
        return data

    def body(wf, input):
        return input

    with pytest.raises(InvalidInput, match="step function"):
        pw.workflow("tests.shared_name")(body)
    assert not registry.is_workflow("tests.shared_name")


def test_step_function__name_of_a_workflow_rejected():
    @pw.workflow("tests.shared_name")
    def body(wf, input):
        return input

    def step(data, ctx):
        return data

    with pytest.raises(InvalidInput, match="workflow"):
        pw.step_function("tests.shared_name")(step)
    with pytest.raises(StepFunctionNotFound):
        registry.get_step_function("tests.shared_name")


@pytest.mark.parametrize("name", ["", "   ", None, 42])
def test_workflow__invalid_name_rejected(name):
    def body(wf, input):
        return input

    with pytest.raises(InvalidInput):
        pw.workflow(name)(body)


@pytest.mark.parametrize("name", ["", None])
def test_step_function__invalid_name_rejected(name):
    def step(data, ctx):
        return data

    with pytest.raises(InvalidInput):
        pw.step_function(name)(step)


@pytest.mark.parametrize("key", ["a#1", "a:onError", "node[0]", "x]", "", "  ", 7])
def test_workflow__invalid_planned_step_keys_rejected(key):
    with pytest.raises(InvalidInput):
        pw.workflow("tests.bad_plan", planned_steps=["fine", key])
    assert not registry.is_workflow("tests.bad_plan")


@pytest.mark.parametrize("key", ["charge", "send-mail", "total 2", "étape_1", "a.b/c"])
def test_validate_step_key__ordinary_keys_accepted(key):
    assert validate_step_key(key) == key


def test_step_function__timeout_with_inline_rejected():
    # Whether the function is sync (an alarm needs a worker) is known once it is decorated.
    with pytest.raises(InvalidInput, match="timeout"):
        pw.step_function("tests.inline_timeout", inline=True, timeout="5s")(_make_step_function())
    with pytest.raises(InvalidInput):
        pw.step_function("tests.inline_timeout_default", timeout=1000)(_make_step_function())
    assert "tests.inline_timeout" not in registry.step_functions


def test_step_function__invalid_timeout_rejected():
    with pytest.raises(InvalidInput):
        pw.step_function("tests.bad_timeout", inline=False, timeout="forever")


def test_get_workflow__unknown_raises_workflow_not_found():
    with pytest.raises(WorkflowNotFound) as caught:
        registry.get_workflow("tests.nowhere")
    assert caught.value.name == "tests.nowhere"
    assert caught.value.code == "WORKFLOW_NOT_FOUND"


def test_get_step_function__unknown_raises_step_function_not_found():
    with pytest.raises(StepFunctionNotFound) as caught:
        registry.get_step_function("tests.nowhere")
    assert caught.value.name == "tests.nowhere"
    assert caught.value.code == "RPC_NOT_FOUND"


def test_get_step_function__a_workflow_name_is_not_a_step_function():
    @pw.workflow("tests.only_workflow")
    def body(wf, input):
        return input

    with pytest.raises(StepFunctionNotFound):
        registry.get_step_function("tests.only_workflow")


def _import_fresh(module_name, path, source):
    path.write_text(textwrap.dedent(source))
    sys.modules.pop(module_name, None)
    importlib.invalidate_caches()
    return importlib.import_module(module_name)


def test_code_fingerprint__changes_with_source(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path = tmp_path / "pikku_fingerprint_probe.py"
    source = """
        def body(wf, input):
            return wf.do("charge", "payments.charge", {{"amount": {amount}}})
    """
    try:
        before = code_fingerprint(_import_fresh(path.stem, path, source.format(amount=5)).body)
        same = code_fingerprint(_import_fresh(path.stem, path, source.format(amount=5)).body)
        after = code_fingerprint(_import_fresh(path.stem, path, source.format(amount=50)).body)
    finally:
        sys.modules.pop(path.stem, None)

    assert before == same
    assert before != after
    assert len(before) == 16
    assert int(before, 16) >= 0


def test_code_fingerprint__differs_between_functions():
    def one(wf, input):
        return 1

    def two(wf, input):
        return 2

    assert code_fingerprint(one) == code_fingerprint(one)
    assert code_fingerprint(one) != code_fingerprint(two)


def test_code_fingerprint__without_source_still_changes_with_constants():
    # exec'd code has no source file: the fingerprint falls back to the code object.
    namespace_a: dict = {}
    namespace_b: dict = {}
    exec("def body(wf, input):\n    return wf.do('charge', 'payments.charge')\n", namespace_a)
    exec("def body(wf, input):\n    return wf.do('charge', 'payments.refund')\n", namespace_b)

    assert code_fingerprint(namespace_a["body"]) != code_fingerprint(namespace_b["body"])


_SOURCELESS_PROBE = """
import sys
from pikku_workflows.registry import code_fingerprint
namespace = {}
exec(
    "def body(wf, input):\\n"
    "    pick = lambda key: key in {'alpha', 'beta', 'gamma', 'delta'}\\n"
    "    return [wf.do(k, 'tests.step') for k in ('alpha', 'omega') if pick(k)]\\n",
    namespace,
)
sys.stdout.write(code_fingerprint(namespace["body"]))
"""


def test_code_fingerprint__without_source_is_stable_across_processes():
    # Nested code objects and frozenset constants must not leak addresses or hash-seed order.
    fingerprints = {
        subprocess.run(
            [sys.executable, "-c", _SOURCELESS_PROBE],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(fingerprints) == 1
    assert len(fingerprints.pop()) == 16


def test_code_fingerprint__without_source_changes_with_nested_code():
    namespace_a: dict = {}
    namespace_b: dict = {}
    exec("def body(wf, input):\n    return (lambda: 'a')()\n", namespace_a)
    exec("def body(wf, input):\n    return (lambda: 'b')()\n", namespace_b)

    assert code_fingerprint(namespace_a["body"]) != code_fingerprint(namespace_b["body"])
