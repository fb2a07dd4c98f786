"""Log records emitted inside a pass or a step name their run, workflow, step and attempt,
through the filter the app puts on the configured handlers, on a worker as in the pass; the
JSON formatter of docs/observability.md writes them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.observability.json_logs import JsonFormatter
from pikku_workflows.observability.log_context import RunContextFilter
from pikku_workflows.tasks import orchestrate
from tests.queue import drain_queue

pytestmark = pytest.mark.django_db

user_logger = logging.getLogger("log_tests.user_code")


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """What a JSON handler configured as the docs show has written so far, a dict per record."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RunContextFilter())
    user_logger.addHandler(handler)
    user_logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        user_logger.removeHandler(handler)


def register(inline_step: bool = True) -> None:
    """`log_tests.order`: its charge fails its first attempt when the input says `flaky`."""

    @pw.step_function("log_tests.charge", inline=inline_step)
    def charge(data: Any, ctx: pw.StepContext) -> str:
        user_logger.info("charging, attempt %s", ctx.attempt)
        if data["flaky"] and ctx.attempt == 1:
            raise ConnectionError("gateway down")
        return "charged"

    @pw.workflow("log_tests.order")
    def order(wf: pw.Workflow, input: Any) -> Any:
        user_logger.info("replaying the body")
        flaky = input.get("flaky", False)
        return wf.do("charge", "log_tests.charge", {"flaky": flaky}, retries=1, retry_delay=0)


def test_log_context__records_in_a_pass_and_its_steps(
    json_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    register()
    run_id = pw.start_workflow("log_tests.order", {"flaky": True}, inline=True)
    user_logger.info("outside any run")
    lines = json_lines()
    run = {"run_id": str(run_id), "workflow": "log_tests.order"}

    body = [line for line in lines if line["message"] == "replaying the body"]
    assert body and all(line | run == line for line in body)
    assert all(line["step_key"] is None and line["attempt"] is None for line in body)
    steps = [line for line in lines if line["message"].startswith("charging")]
    assert [(line["step_key"], line["attempt"]) for line in steps] == [("charge", 1), ("charge", 2)]
    assert all(line | run == line for line in steps)
    outside = lines[-1]
    assert outside["message"] == "outside any run"
    assert (outside["run_id"], outside["workflow"], outside["step_key"]) == (None, None, None)


@pytest.mark.postgres
def test_log_context__records_of_a_queued_step_on_a_worker(
    json_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    register(inline_step=False)
    run_id = pw.start_workflow("log_tests.order", {})
    orchestrate(str(run_id))
    drain_queue()
    lines = [line for line in json_lines() if line["message"].startswith("charging")]
    assert lines
    assert all(
        (line["run_id"], line["workflow"], line["step_key"])
        == (str(run_id), "log_tests.order", "charge")
        for line in lines
    )
    assert [line["attempt"] for line in lines] == [1]


def test_log_context__the_app_filters_the_configured_handlers() -> None:
    handler = logging.getLogger("pikku_workflows").handlers[0]
    assert any(isinstance(found, RunContextFilter) for found in handler.filters)


def test_log_context__engine_lines_keep_their_own_fields(
    caplog: Any, django_capture_on_commit_callbacks: Any
) -> None:
    register()
    caplog.handler.addFilter(RunContextFilter())
    with (
        caplog.at_level(logging.INFO, logger="pikku_workflows"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        run_id = pw.start_workflow("log_tests.order", {"flaky": True}, inline=True)
    failed = [r for r in caplog.records if "attempt 1/2 failed" in r.getMessage()]
    assert failed
    assert [(r.run_id, r.step_key) for r in failed] == [(str(run_id), "charge")]
