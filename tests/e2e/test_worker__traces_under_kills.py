"""SIGKILL of the whole worker group, twice, with tracing on, while runs of queued steps and
child runs are in flight (the worker's processes write their spans to a file): every attempt
whose end committed has exactly one span, saying what its row says; no span describes an
attempt whose end never committed; and once every run has ended, every span's parent was
exported too."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun, WorkflowStepHistory
from pikku_workflows.observability.tracing import attempt_span_id, run_span_id
from pikku_workflows.status import TERMINAL_RUN_STATUSES, StepStatus
from tests.conftest import wait_until
from tests.e2e import traced_workflows  # noqa: F401 - registers the workflows here too

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

RUNS = 4  # with two worker processes, both stay inside steps until after the last kill
STEPS = 4
SECONDS = 1.0
KILLS = 2
LAPSED = "STEP_LEASE_EXPIRED"


def both_processes_deep_in_a_step(inside: Path) -> bool:
    """Two processes are inside `traced.slow` with most of its sleep ahead: nowhere near a
    commit or an export (a process killed between those loses that one span, by design)."""
    now = time.time()
    fresh = 0
    for marker in inside.iterdir():
        try:
            fresh += now - float(marker.read_text() or 0) < SECONDS / 3
        except (OSError, ValueError):
            continue  # the step just ended and removed it
    return fresh >= 2


def ended_attempts() -> dict[tuple[str, str, int], dict[str, Any]]:
    rows = WorkflowStepHistory.objects.exclude(succeeded_at=None, failed_at=None).values(
        "step__run_id", "step__step_key", "attempt", "status", "error"
    )
    return {(str(row["step__run_id"]), row["step__step_key"], row["attempt"]): row for row in rows}


def test_worker__kill_9_with_tracing_leaves_one_span_per_committed_attempt(
    start_worker: Any, tmp_path: Path, settings: Any
) -> None:
    spans_file, inside = tmp_path / "spans.jsonl", tmp_path / "inside"
    inside.mkdir()
    tracing = {
        "PIKKU_OTEL": "1",
        "PIKKU_EXTRA_WORKFLOW_MODULES": "tests.e2e.workflows,tests.e2e.traced_workflows",
        "PIKKU_TEST_SPANS_FILE": str(spans_file),
    }
    worker = start_worker(**tracing)
    settings.PIKKU_WORKFLOWS = {"OTEL": True}
    input = {"steps": STEPS, "inside": str(inside), "seconds": SECONDS}
    roots = [pw.start_workflow("traced.chaos", input) for _ in range(RUNS)]

    for kill in range(1, KILLS + 1):
        done = RUNS * STEPS * kill // (KILLS + 2)
        wait_until(
            lambda done=done: (
                WorkflowStepHistory.objects.filter(
                    step__function_name="traced.slow", status=StepStatus.SUCCEEDED
                ).count()
                >= done
            ),
            120,
            f"{done} slow steps to succeed",
        )
        wait_until(lambda: both_processes_deep_in_a_step(inside), 60, "two processes mid-step")
        worker.kill_group()
        worker = start_worker(**tracing)

    def every_run_ended() -> bool:
        runs = WorkflowRun.objects.all()
        return (
            runs.count() == 2 * RUNS and not runs.exclude(status__in=TERMINAL_RUN_STATUSES).exists()
        )

    wait_until(every_run_ended, 240, "every run and child run to end")
    attempts = ended_attempts()
    runs = {str(run_id) for run_id in WorkflowRun.objects.values_list("pk", flat=True)}
    expected = len(attempts) + len(runs)

    def all_spans() -> list[dict[str, Any]] | None:
        lines = spans_file.read_text().splitlines() if spans_file.exists() else []
        return [json.loads(line) for line in lines] if len(lines) >= expected else None

    spans = wait_until(all_spans, 30, "every span to be exported")
    lapsed = [row for row in attempts.values() if (row["error"] or {}).get("code") == LAPSED]
    assert len(lapsed) >= KILLS, "the kills landed inside steps: their attempts lapsed"

    step_spans = [span for span in spans if span["name"].startswith("step ")]
    described = [
        (span["attributes"]["pikku.run_id"], span["attributes"]["pikku.step_key"],
         span["attributes"]["pikku.attempt"])
        for span in step_spans
    ]  # fmt: skip
    # Exactly one span per committed attempt, and none for an attempt that never ended.
    assert sorted(described) == sorted(attempts)
    for span, key in zip(step_spans, described, strict=True):
        assert span["span_id"] == f"{attempt_span_id(key[0], key[1], key[2]):016x}"
        assert span["error"] == (attempts[key]["status"] == StepStatus.FAILED), key
    run_spans = [span for span in spans if span["name"].startswith("workflow ")]
    assert sorted(span["attributes"]["pikku.run_id"] for span in run_spans) == sorted(runs)
    for span in run_spans:
        assert span["span_id"] == f"{run_span_id(span['attributes']['pikku.run_id']):016x}"

    # Every parent exported: a step's run, a child run's step in its parent run.
    exported = {span["span_id"] for span in spans}
    assert len(exported) == len(spans) == expected
    orphans = [span for span in spans if span["parent_id"] and span["parent_id"] not in exported]
    assert orphans == []
    assert sum(span["parent_id"] is None for span in spans) == len(roots)
