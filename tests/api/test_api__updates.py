"""`POST runs/{id}/updates/{name}/`: 202 with the update id when `wait=accepted`, 200 with the
run's reply, the same `update_id` answered once; 422 when the validator refuses (nothing kept),
504 when no reply comes in time (the update stays), 409 for an ended run, 400 for an update the
workflow does not take."""

from __future__ import annotations

from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.engine.replay.orchestrator import orchestrate
from pikku_workflows.models import WorkflowUpdate
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


def in_stock(input, state, payload):
    if payload["sku"] == "gone":
        raise pw.UpdateRejected("sold out")


@pytest.fixture
def cart(operator) -> str:
    @pw.workflow("api_updates.cart", updates={"add": in_stock})
    def cart(wf, input):
        message = wf.receive("add")
        wf.reply(message, {"added": message.payload["sku"], "by": message.by})
        return "done"

    return pw.start_workflow("api_updates.cart", {}, started_by=operator)


def send(api: Any, run_id: str, body: dict[str, Any], name: str = "add") -> Any:
    return api.post(f"{API}runs/{run_id}/updates/{name}/", body, format="json")


def test_update__accepted_then_answered_once(operator_api, cart):
    accepted = send(operator_api, cart, {"payload": {"sku": "A1"}, "wait": "accepted"})
    assert accepted.status_code == 202
    update_id = accepted.json()["update_id"]

    orchestrate(cart)
    answered = send(operator_api, cart, {"payload": {"sku": "A1"}, "update_id": update_id})

    assert answered.status_code == 200
    assert answered.json() == {
        "update_id": update_id,
        "result": {"added": "A1", "by": "operator"},
    }
    assert WorkflowUpdate.objects.count() == 1


def test_update__the_validator_s_refusal_is_a_422_and_keeps_nothing(operator_api, cart):
    response = send(operator_api, cart, {"payload": {"sku": "gone"}})

    assert response.status_code == 422
    assert response.json()["code"] == "UPDATE_REJECTED"
    assert not WorkflowUpdate.objects.exists()


def test_update__no_reply_in_time_is_a_504_and_the_update_stays(operator_api, cart):
    response = send(operator_api, cart, {"payload": {"sku": "A1"}, "timeout": "20ms"})

    assert response.status_code == 504
    assert response.json()["code"] == "UPDATE_TIMEOUT"
    assert WorkflowUpdate.objects.count() == 1


def test_update__to_an_ended_run_is_a_409(operator_api, cart):
    send(operator_api, cart, {"payload": {"sku": "A1"}, "wait": "accepted"})
    orchestrate(cart)

    response = send(operator_api, cart, {"payload": {"sku": "B2"}, "wait": "accepted"})

    assert response.status_code == 409
    assert response.json()["code"] == "INVALID_TRANSITION"


def test_update__a_name_the_workflow_does_not_take_is_a_400(operator_api, cart):
    response = send(operator_api, cart, {"payload": {}}, name="remove")

    assert response.status_code == 400
    assert not WorkflowUpdate.objects.exists()
