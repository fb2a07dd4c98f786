"""`pikku_workflows.testing.drain` (and the `workflows` fixture of the pytest plugin): queued
passes, queued steps, child runs and due timers run in the test's process until nothing is
runnable; `advance` skips time for the engine's timers; in pytest and in Django's `TestCase`
(whose transaction never commits, so no queue message is ever sent), on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pytest
from django.test import TestCase

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun
from pikku_workflows.testing import DrainLimitExceeded, drain

CALLS: list[str] = []


def register_shop() -> None:
    """A queued charge (failing once), a 10-minute cool-off, a child invoice, a queued ship."""

    @pw.step_function("drain.charge", inline=False)
    def charge(data: Any, ctx: pw.StepContext) -> dict[str, Any]:
        CALLS.append(f"charge#{ctx.attempt}")
        if ctx.attempt == 1 and data.get("flaky"):
            raise ConnectionError("gateway down")
        return {"charge_id": "ch_1"}

    @pw.step_function("drain.render")
    def render(data: Any, ctx: pw.StepContext) -> str:
        CALLS.append("render")
        return "INV-1"

    @pw.step_function("drain.ship", inline=False)
    def ship(data: Any, ctx: pw.StepContext) -> str:
        CALLS.append("ship")
        return "TRK1"

    @pw.workflow("drain.invoice")
    def invoice(wf: pw.Workflow, input: Any) -> Any:
        return wf.do("render", "drain.render")

    @pw.workflow("drain.order")
    def order(wf: pw.Workflow, input: Any) -> Any:
        charge = wf.do(
            "charge",
            "drain.charge",
            {"flaky": input.get("flaky", False)},
            retries=1,
            retry_delay="5m",
        )
        wf.sleep("cool-off", "10m")
        bill = wf.do("invoice", "drain.invoice", {})
        return {
            "charge": charge["charge_id"],
            "invoice": bill,
            "tracking": wf.do("ship", "drain.ship"),
        }


@pytest.fixture
def shop() -> None:
    CALLS.clear()
    register_shop()


pytestmark = pytest.mark.django_db(transaction=True)


def test_drain__runs_queued_work_until_the_run_waits_on_a_timer(shop):
    run_id = pw.start_workflow("drain.order", {})

    summary = drain(run_id)

    assert summary is not None
    assert summary["status"] == "running"
    assert summary["waiting_on"]["kind"] == "timer"
    assert summary["waiting_on"]["step_key"] == "cool-off"
    assert CALLS == ["charge#1"]


def test_drain__advance_fires_the_timers_and_the_run_completes(shop):
    run_id = pw.start_workflow("drain.order", {})
    drain(run_id)

    summary = drain(run_id, advance="10m")

    assert summary is not None
    assert summary["status"] == "completed"
    assert CALLS == ["charge#1", "render", "ship"]
    assert WorkflowRun.objects.get(pk=run_id).output == {
        "charge": "ch_1",
        "invoice": "INV-1",
        "tracking": "TRK1",
    }


def test_drain__advance_moves_timers_armed_while_it_drains_and_skips_retry_backoffs(shop):
    run_id = pw.start_workflow("drain.order", {"flaky": True})

    assert drain(run_id)["waiting_on"]["kind"] == "retry"  # type: ignore[index]
    # Ten minutes pass: the 5-minute backoff ends, the retry succeeds and arms the 10-minute
    # cool-off, which then has 5 minutes to go.
    assert drain(run_id, advance=datetime.timedelta(minutes=10))["waiting_on"]["kind"] == "timer"  # type: ignore[index]
    # Four of its five minutes pass (a minute left for the real time a loaded machine takes).
    assert drain(run_id, advance=240_000)["waiting_on"]["kind"] == "timer"  # type: ignore[index]
    assert drain(run_id, advance="1m")["status"] == "completed"  # type: ignore[index]
    assert CALLS == ["charge#1", "charge#2", "render", "ship"]


def test_drain__a_run_id_leaves_other_runs_alone(shop):
    mine = pw.start_workflow("drain.order", {})
    other = pw.start_workflow("drain.order", {})

    drain(mine, advance="10m")

    assert WorkflowRun.objects.get(pk=mine).status == "completed"
    assert not WorkflowRun.objects.get(pk=other).steps.exists()
    drain()
    assert WorkflowRun.objects.get(pk=other).steps.exists()


def test_drain__stops_at_its_limit_rather_than_looping(shop):
    run_id = pw.start_workflow("drain.order", {})
    with pytest.raises(DrainLimitExceeded):
        drain(run_id, advance="10m", limit=2)


def test_drain__the_pytest_plugin_offers_it_as_the_workflows_fixture(shop, workflows):
    run_id = pw.start_workflow("drain.order", {})
    assert workflows.drain(run_id, advance="10m")["status"] == "completed"


def test_drain__values_django_models_hold_read_the_same_on_the_first_pass_and_on_replay():
    seen: list[Any] = []

    @pw.step_function("drain.price")
    def price(data: Any, ctx: pw.StepContext) -> dict[str, Any]:
        return {
            "amount": decimal.Decimal("12.50"),
            "due": datetime.date(2024, 5, 1),
            "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        }

    @pw.workflow("drain.priced")
    def priced(wf: pw.Workflow, input: Any) -> Any:
        quote = wf.do("price", "drain.price")
        seen.append(quote)
        wf.sleep("wait", "1h")  # parks: the next pass replays the recorded result
        return quote

    run_id = pw.start_workflow("drain.priced", {"total": decimal.Decimal("3.10")}, inline=True)
    drain(run_id, advance="1h")

    stored = {"amount": "12.50", "due": "2024-05-01", "id": "12345678-1234-5678-1234-567812345678"}
    assert len(seen) >= 2  # the first pass, then replays
    assert all(quote == stored for quote in seen)
    run = WorkflowRun.objects.get(pk=run_id)
    assert (run.input, run.output) == ({"total": "3.10"}, stored)


class DrainInTestCase(TestCase):
    """Inside TestCase nothing commits: no queue message is sent, the tables say what to do."""

    def setUp(self) -> None:
        CALLS.clear()
        register_shop()

    def test_drain__completes_a_queued_run_inside_a_test_case(self) -> None:
        run_id = pw.start_workflow("drain.order", {"flaky": True})

        summary = drain(run_id, advance="1h")

        assert summary is not None
        self.assertEqual(summary["status"], "completed")
        self.assertEqual(CALLS, ["charge#1", "charge#2", "render", "ship"])
