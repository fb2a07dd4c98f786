"""One trace from an HTTP `POST .../runs/` through the pass on a real worker, a queued step
and a child run: every span in the caller's trace, each under its parent, one per ended
attempt and one per run (the worker's processes write them to a file)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from pikku_workflows.models import WorkflowRun, WorkflowStepHistory
from pikku_workflows.status import RunStatus
from tests.conftest import wait_until
from tests.e2e import traced_workflows  # noqa: F401 - registers the workflows here too

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


def test_worker__one_trace_from_the_request_to_the_child_run(
    start_worker: Any, tmp_path: Path, django_user_model: Any, settings: Any
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    start_worker(
        PIKKU_OTEL="1",
        PIKKU_EXTRA_WORKFLOW_MODULES="tests.e2e.workflows,tests.e2e.traced_workflows",
        PIKKU_TEST_SPANS_FILE=str(spans_file),
    )
    settings.PIKKU_WORKFLOWS = {"OTEL": True}
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_superuser("ops", "o@example.com", "x"))
    response = api.post(
        "/api/workflows/definitions/traced.order/runs/",
        {"input": {}},
        format="json",
        HTTP_TRACEPARENT=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["id"]

    def ended() -> bool:
        return WorkflowRun.objects.filter(parent_run_id=run_id).exists() and not (
            WorkflowRun.objects.filter(status=RunStatus.RUNNING).exists()
        )

    wait_until(ended, 60, "the run and its child to end")
    expected = WorkflowStepHistory.objects.exclude(succeeded_at=None, failed_at=None).count() + 2

    def all_spans() -> list[dict[str, Any]] | None:
        lines = spans_file.read_text().splitlines() if spans_file.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= expected else None

    spans = wait_until(all_spans, 20, "every span to be exported")
    assert len(spans) == expected
    assert len({span["span_id"] for span in spans}) == expected
    assert {span["trace_id"] for span in spans} == {CALLER_TRACE}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    (run,) = by_name["workflow traced.order"]
    (child,) = by_name["workflow traced.invoice"]
    (invoice_step,) = by_name["step invoice"]
    assert run["parent_id"] == CALLER_SPAN
    assert child["parent_id"] == invoice_step["span_id"]
    renders = by_name["step render"]
    assert {span["parent_id"] for span in renders} == {run["span_id"], child["span_id"]}
    assert {span["attributes"]["pikku.dispatch"] for span in renders} <= {"queued", "in_place"}
    assert os.getpid() not in {span["pid"] for span in spans}  # all from the worker's processes
