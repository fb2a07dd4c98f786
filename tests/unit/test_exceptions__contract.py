from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pikku_workflows as pw
from pikku_workflows import exceptions

# Every exported exception, with the code callers rely on (None: not pinned).
EXPORTED_CODES = {
    "WorkflowNotFound": "WORKFLOW_NOT_FOUND",
    "RunNotFound": "RUN_NOT_FOUND",
    "InvalidInput": "INVALID_INPUT",
    "InvalidTransition": "INVALID_TRANSITION",
    "RunFailed": "RUN_FAILED",
    "RunCancelled": "RUN_CANCELLED",
    "RunSuspended": "RUN_SUSPENDED",
    "RunTimeout": "RUN_TIMEOUT",
    "StepFailed": "STEP_FAILED",
    "IdempotencyConflict": "IDEMPOTENCY_CONFLICT",
    "StepFunctionNotFound": "RPC_NOT_FOUND",
    "StepResultNotSerializable": None,
    "NonDeterministicReplay": "NON_DETERMINISTIC",
    "ApprovalResolved": "APPROVAL_RESOLVED",
    "ApprovalForbidden": "APPROVAL_FORBIDDEN",
    "SignalTimeout": "SIGNAL_TIMEOUT",
    "WorkflowDispatchException": None,
    "StepSuperseded": None,
}


@pytest.mark.parametrize("name", sorted(EXPORTED_CODES))
def test_exported_exception__in_namespace_and_subclasses_workflow_error(name):
    cls = getattr(pw, name)
    assert name in pw.__all__
    assert issubclass(cls, pw.WorkflowError)
    assert issubclass(cls, Exception)
    assert cls is getattr(exceptions, name)


@pytest.mark.parametrize("name", sorted(EXPORTED_CODES))
def test_exported_exception__declares_its_own_code(name):
    cls = getattr(pw, name)
    # A class attribute of its own, not WorkflowError's generic code.
    assert "code" in vars(cls)
    assert isinstance(cls.code, str)
    assert cls.code.isupper()
    assert cls.code != pw.WorkflowError.code
    if EXPORTED_CODES[name] is not None:
        assert cls.code == EXPORTED_CODES[name]


def test_exported_exception__codes_are_unique():
    codes = [getattr(pw, name).code for name in EXPORTED_CODES]
    assert len(codes) == len(set(codes))


def test_workflow_error__default_message_is_the_docstring():
    assert str(pw.InvalidInput()) == "The input is not valid."
    assert pw.ApprovalResolved().message == "The approval was already decided."
    assert str(pw.InvalidInput("retries must be >= 0")) == "retries must be >= 0"


def test_error_with_data__builds_its_message_from_attributes():
    transition = pw.InvalidTransition("run", "completed", "running")
    assert (transition.current, transition.target) == ("completed", "running")
    assert "'completed'" in str(transition) and "'running'" in str(transition)

    failed = pw.StepFailed("charge", {"message": "card declined"})
    assert failed.step_key == "charge"
    assert failed.error == {"message": "card declined"}
    assert "card declined" in str(failed)

    run_failed = pw.RunFailed("run-1", {"code": "STEP_FAILED", "message": "boom"})
    assert run_failed.run_id == "run-1"
    assert run_failed.error["code"] == "STEP_FAILED"
    assert "boom" in str(run_failed)

    superseded = pw.StepSuperseded("charge", 2)
    assert (superseded.step_key, superseded.attempt) == ("charge", 2)


def test_exceptions__hold_no_control_flow_signal():
    # The errors are Exceptions; what skips `except Exception:` lives in control_flow.
    outside_exception = [
        name
        for name, cls in vars(exceptions).items()
        if isinstance(cls, type)
        and issubclass(cls, BaseException)
        and not issubclass(cls, Exception)
    ]
    assert outside_exception == []


def test_invalid_input__a_plain_one_lists_its_message_as_its_problem():
    assert pw.InvalidInput("bad").problems == ["bad"]
    assert pw.InvalidInput().problems == ["The input is not valid."]
    assert pw.InvalidInput(problems=["x", "y"]).problems == ["x", "y"]
    assert str(pw.InvalidInput(problems=["x", "y"])) == "The input is not valid:\n- x\n- y"


def test_error_codes__are_spelled_only_where_they_are_defined():
    # Package code compares and records `SomeError.code`, so renaming a code is one edit.
    package = Path(pw.__file__).parent
    codes = {
        cls.code
        for cls in vars(exceptions).values()
        if isinstance(cls, type) and issubclass(cls, pw.WorkflowError)
    }
    spelled = [
        (str(path.relative_to(package)), node.value)
        for path in package.rglob("*.py")
        if "migrations" not in path.parts and path.name != "exceptions.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in codes
    ]
    assert spelled == []
