"""The workflows `bench/queued.py` runs on pikku_workflows workers (loaded by the worker
through PIKKU_EXTRA_WORKFLOW_MODULES=bench.queued_workflows)."""

from __future__ import annotations

import pikku_workflows as pw
from bench.otel import install_in_memory_exporter, tracing_requested

if tracing_requested():  # `bench/queued.py --otel`: this worker traces what it commits
    install_in_memory_exporter()

WORKFLOW = "bench.queued"
STEP = "bench.queued_noop"


@pw.step_function(STEP, inline=False)
def queued_noop(data: dict, ctx: pw.StepContext) -> dict:
    return {"i": data["i"]}


@pw.workflow(WORKFLOW)
def queued_bench(wf: pw.Workflow, input: dict) -> dict:
    for i in range(input["k"]):
        wf.do(f"s{i}", STEP, {"i": i})
    return {"steps": input["k"]}
