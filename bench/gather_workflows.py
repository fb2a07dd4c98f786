"""The workflows `bench/gather.py` runs on pikku_workflows workers (loaded by the worker through
PIKKU_EXTRA_WORKFLOW_MODULES=bench.gather_workflows)."""

from __future__ import annotations

import time
from pathlib import Path

import pikku_workflows as pw

MAP = "bench.gather_map"
SEQUENCE = "bench.gather_sequence"
STEP = "bench.gather_work"


@pw.step_function(STEP, inline=False)
def work(data: dict, ctx: pw.StepContext) -> int:
    time.sleep(data["ms"] / 1000)  # the step's own work: an API call, a file to render
    return data["i"]


def note_pass(input: dict) -> None:
    """One line per pass of the body in the file the bench named (how it counts passes)."""
    if input.get("passes"):
        with Path(input["passes"]).open("a") as log:
            log.write("pass\n")


@pw.workflow(MAP)
def gather_map(wf: pw.Workflow, input: dict) -> int:
    note_pass(input)
    items = [{"i": i, "ms": input["ms"]} for i in range(input["n"])]
    return sum(wf.map("w", STEP, items))


@pw.workflow(SEQUENCE)
def gather_sequence(wf: pw.Workflow, input: dict) -> int:
    note_pass(input)
    return sum(wf.do(f"w{i}", STEP, {"i": i, "ms": input["ms"]}) for i in range(input["n"]))
