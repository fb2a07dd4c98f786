from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows import control_flow, models
from pikku_workflows.exceptions import WorkflowSuspended

SIGNALS = [
    "ControlFlowSignal",
    "RunParked",
    "SuspendRequested",
    "PassAbandoned",
    "ReplayDiverged",
    "RunInterrupted",
    "TimeLimitAlarm",
    "ContinueAsNew",
]


@pytest.mark.parametrize("name", SIGNALS)
def test_control_flow_signal__is_base_exception_not_exception(name):
    cls = getattr(control_flow, name)
    assert issubclass(cls, control_flow.ControlFlowSignal)
    assert issubclass(cls, BaseException)
    assert not issubclass(cls, Exception)
    assert not issubclass(cls, pw.WorkflowError)


def test_control_flow_signal__escapes_except_exception():
    def body():
        try:
            raise control_flow.SuspendRequested("waiting for stock")
        except Exception:  # what a user's workflow body might write
            return "swallowed"

    with pytest.raises(control_flow.SuspendRequested) as caught:
        body()
    assert caught.value.reason == "waiting for stock"
    assert caught.value.code == WorkflowSuspended.code


def test_control_flow__every_class_that_skips_exception_is_a_signal_listed_here():
    outside_exception = {
        name
        for name, cls in vars(control_flow).items()
        if isinstance(cls, type)
        and issubclass(cls, BaseException)
        and not issubclass(cls, Exception)
    }
    assert outside_exception == set(SIGNALS)


@pytest.mark.parametrize("name", SIGNALS)
def test_control_flow_signal__shares_no_name_with_a_model_or_an_export(name):
    assert not hasattr(models, name)
    assert name not in pw.__all__
