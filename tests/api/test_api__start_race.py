"""Two first requests racing with one idempotency key: the one whose insert lost the race on the
key's unique index answers 200 with the winner's run, not 201 (it created nothing)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from tests.api.conftest import API
from tests.concurrency.harness import JOIN_TIMEOUT
from tests.conftest import wait_until
from tests.faults import backend_pid, is_waiting_on_a_lock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

START = API + "definitions/api_tests.order/runs/"
BODY = {"input": {"amount": 1}, "idempotency_key": "order-7"}


class OtherCaller:
    """Starts the key's run in a transaction of its own and commits only when told to."""

    def __init__(self) -> None:
        self.inserted, self.commit = threading.Event(), threading.Event()
        self.run_id: str | None = None
        self._thread = threading.Thread(target=self._start, daemon=True)
        self._thread.start()
        assert self.inserted.wait(10), "the other caller did not insert its run"

    def _start(self) -> None:
        try:
            with transaction.atomic():
                self.run_id = pw.start_workflow(
                    "api_tests.order", BODY["input"], idempotency_key=BODY["idempotency_key"]
                )
                self.inserted.set()
                self.commit.wait(JOIN_TIMEOUT)
        finally:
            self.inserted.set()
            connection.close()

    def join(self) -> None:
        self._thread.join(JOIN_TIMEOUT)
        assert not self._thread.is_alive(), "the other caller hung"


def test_start__a_request_that_lost_the_race_on_the_key_answers_200_with_the_winners_run(
    shop, operator_api
):
    other = OtherCaller()
    answer: dict[str, Any] = {}

    def request() -> None:
        answer["pid"] = backend_pid()
        try:
            answer["response"] = operator_api.post(START, BODY, format="json")
        finally:
            connection.close()

    requester = threading.Thread(target=request, daemon=True)
    requester.start()
    try:
        # The request read no run with the key (uncommitted), so its insert waits on the index.
        wait_until(lambda: "pid" in answer and is_waiting_on_a_lock(answer["pid"]), 10)
    finally:
        other.commit.set()
    other.join()
    requester.join(JOIN_TIMEOUT)

    assert other.run_id is not None and not requester.is_alive()
    response = answer["response"]
    assert response.status_code == 200, response.json()
    assert response.json()["id"] == other.run_id
    assert WorkflowRun.objects.filter(idempotency_key="order-7").count() == 1
