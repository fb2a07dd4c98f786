"""Registering async functions: a step function may be an `async def` (its timeout allowed
in-process, `atomic=True` refused); a workflow body may not (docs/code-workflows.md, "Async step
functions")."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.registry import registry


def test_async_step_function__cannot_be_atomic_and_takes_a_timeout_in_process():
    with pytest.raises(InvalidInput, match="atomic=True needs a sync function"):

        @pw.step_function("as.atomic", atomic=True)
        async def atomic(data: Any, ctx: pw.StepContext) -> None:
            return None

    with pytest.raises(InvalidInput, match="timeout is enforced only"):

        @pw.step_function("as.sync_timeout", timeout="1s")
        def sync_timeout(data: Any, ctx: pw.StepContext) -> None:
            return None

    @pw.step_function("as.async_timeout", timeout="1s")
    async def async_timeout(data: Any, ctx: pw.StepContext) -> None:
        return None

    assert registry.step_functions["as.async_timeout"].timeout_ms == 1000


def test_async_workflow_body__is_refused_at_registration():
    with pytest.raises(InvalidInput, match="a body is a plain def"):

        @pw.workflow("as.async_body")
        async def async_body(wf: pw.Workflow, input: dict) -> None:
            return None
