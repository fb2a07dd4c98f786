"""Callers racing the same `update_id` make one update: they take the run's row lock in turn,
and each after the first finds the row the first wrote."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowSignal, WorkflowUpdate
from tests.concurrency.harness import race

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CALLERS = 25


def test_update__concurrent_calls_with_one_update_id_make_one_row_and_one_answer():
    @pw.workflow("races.cart", updates={"add": lambda input, state, payload: None})
    def cart(wf, input):
        message = wf.receive("add")
        wf.reply(message, {"added": message.payload})
        return "done"

    run_id = pw.start_workflow("races.cart", {})

    def send(_):
        return pw.update(run_id, "add", {"sku": "A1"}, wait="accepted", update_id="same")

    outcomes = race([send] * CALLERS)

    assert outcomes == ["same"] * CALLERS
    assert WorkflowUpdate.objects.count() == 1
    assert WorkflowSignal.objects.count() == 1
    orchestrate(run_id)
    answers = {repr(pw.update(run_id, "add", {"sku": "A1"}, update_id="same")) for _ in range(3)}
    assert answers == {repr({"added": {"sku": "A1"}})}
