"""The workflows `bench/flow.py` runs on pikku_workflows workers (loaded by the worker through
PIKKU_EXTRA_WORKFLOW_MODULES=bench.flow_workflows)."""

from __future__ import annotations

import time

import pikku_workflows as pw

RULED = "bench.flow_ruled"
FREE = "bench.flow_free"
RATED = "bench.flow_rated"
HOLDER = "bench.flow_holder"
LIMIT = "bench.flow_rate"
HOLD_STEP = "bench.flow_hold"

pw.define_limit(LIMIT, rate="10/s", burst=5)


@pw.workflow(RULED, concurrency=pw.Concurrency(key=lambda input: input["key"], max_active=2))
def ruled(wf: pw.Workflow, input: dict) -> int:
    return input["n"]


@pw.workflow(FREE)
def free(wf: pw.Workflow, input: dict) -> int:
    return input["n"]


@pw.workflow(RATED, limits=[LIMIT])
def rated(wf: pw.Workflow, input: dict) -> int:
    return input["n"]


@pw.step_function(HOLD_STEP)
def hold(data: dict, ctx: pw.StepContext) -> int:
    time.sleep(data["seconds"])  # the slot holder's own work, long enough to be killed in
    return data["n"]


@pw.workflow(HOLDER, concurrency=pw.Concurrency(key="held", max_active=2))
def holder(wf: pw.Workflow, input: dict) -> int:
    return wf.do("hold", HOLD_STEP, input)
