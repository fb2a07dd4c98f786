"""Workflows the end-to-end tests run in a real `pikku_worker` subprocess.

The worker loads this module through PIKKU_EXTRA_WORKFLOW_MODULES; the test process imports it
too (to start runs and to dispatch from an in-process pass). Step functions that the tests must
observe append one JSON line per attempt to the file named in their data.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pikku_workflows as pw


def record_attempt(path: str, ctx: pw.StepContext, **extra: Any) -> None:
    line = {
        "run_id": ctx.run_id,
        "step_key": ctx.step_key,
        "attempt": ctx.attempt,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        **extra,
    }
    with Path(path).open("a") as log:
        log.write(json.dumps(line) + "\n")


@pw.step_function("e2e.add", inline=False)
def add(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    time.sleep(data.get("seconds", 0))
    return {"value": data["value"] + 1, "pid": os.getpid()}


@pw.step_function("e2e.slow", inline=False)
def slow(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    """Works `seconds` on its first attempt (time to kill the worker), returns at once after."""
    record_attempt(data["log"], ctx)
    if ctx.attempt == 1:
        time.sleep(data["seconds"])
    return {"attempt": ctx.attempt}


@pw.workflow("e2e.count")
def count(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """`steps` queued steps in a row, each adding one."""
    value, pids = input.get("start", 0), []
    for _ in range(input.get("steps", 2)):
        result = wf.do("add", "e2e.add", {"value": value, "seconds": input.get("seconds", 0)})
        value = result["value"]
        pids.append(result["pid"])
    return {"value": value, "pids": pids}


@pw.workflow("e2e.nap")
def nap(wf: pw.Workflow, input: dict[str, Any]) -> str:
    wf.sleep("nap", input.get("duration", "1s"))
    return "rested"


@pw.workflow("e2e.crash")
def crash(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    return wf.do("slow", "e2e.slow", input, retries=2, retry_delay="100ms")


@pw.step_function("e2e.die")
def die(data: dict[str, Any], ctx: pw.StepContext) -> None:
    """An in-process step that kills the process running it, on every attempt."""
    record_attempt(data["log"], ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@pw.workflow("e2e.doomed")
def doomed(wf: pw.Workflow, input: dict[str, Any]) -> None:
    wf.do("die", "e2e.die", input, retries=1)


@pw.step_function("e2e.tick", inline=False)
def tick(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    """A queued step a worker's pass runs in place: logs each attempt, works `seconds`."""
    record_attempt(data["log"], ctx)
    time.sleep(data["seconds"])
    return {"attempt": ctx.attempt}


@pw.workflow("e2e.ticks")
def ticks(wf: pw.Workflow, input: dict[str, Any]) -> list[int]:
    step = {"log": input["log"], "seconds": input["seconds"]}
    return [
        wf.do(f"t{i}", "e2e.tick", step, retries=3, retry_delay="100ms")["attempt"]
        for i in range(input["steps"])
    ]


@pw.workflow("e2e.pondering")
def pondering(wf: pw.Workflow, input: dict[str, Any]) -> list[int]:
    """Queued steps with work in the body between them: while the body works, the step before
    has its result in memory only (it is written with the next step's creation)."""
    step = {"log": input["log"], "seconds": 0.01}
    attempts = []
    for i in range(input["steps"]):
        attempts.append(wf.do(f"p{i}", "e2e.tick", step, retries=3, retry_delay="100ms"))
        time.sleep(input["think"])  # deterministic work of the body: the same on every replay
    return [result["attempt"] for result in attempts]


@pw.step_function("e2e.echo")
def echo(data: Any, ctx: pw.StepContext) -> Any:
    return data


# A fan-out of two slow queued nodes (each works `seconds` on its first attempt: time to kill
# the worker running them) and their join.
_SLOW_NODE = {
    "function": "e2e.slow",
    "input": {
        "log": {"$ref": "trigger", "path": "log"},
        "seconds": {"$ref": "trigger", "path": "seconds"},
    },
    "retries": 2,
    "retry_delay": "100ms",
    "next": "join",
}
pw.graph_workflow(
    "e2e.fan_out",
    {
        "entry": "start",
        "nodes": {
            "start": {"function": "e2e.echo", "next": ["left", "right"]},
            "left": _SLOW_NODE,
            "right": _SLOW_NODE,
            "join": {"function": "e2e.echo"},
        },
    },
)


@pw.workflow("e2e.approved_count")
def approved_count(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Waits for an approval, then counts on a worker as far as it says."""
    decision = wf.approval(
        "go", summary="count on?", expires_in=input.get("expires_in"), **input.get("options", {})
    )
    if not decision.approved:
        return {"status": decision.status, "value": input["value"]}
    result = wf.do("add", "e2e.add", {"value": input["value"]})
    return {"status": decision.status, "by": decision.decided_by, "value": result["value"]}


@pw.workflow("e2e.signalled")
def signalled(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Waits for `go`, then for `never` (which times out)."""
    go = wf.wait_for_signal("go", "go")
    try:
        wf.wait_for_signal("never", "never", timeout="1s")
    except pw.SignalTimeout as exc:
        return {"go": go, "never": exc.code}
    return {"go": go, "never": "came"}


@pw.step_function("e2e.overrun", inline=False, timeout="300ms")
def overrun(data: dict[str, Any], ctx: pw.StepContext) -> str:
    """Works `seconds`, far past its timeout, logging when each attempt starts and (should the
    timeout not stop it) how it ended."""
    record_attempt(data["log"], ctx, event="start")
    try:
        time.sleep(data["seconds"])
    except Exception:
        record_attempt(data["log"], ctx, event="swallowed")  # a broad except must not save it
    record_attempt(data["log"], ctx, event="end")
    return "finished"


@pw.workflow("e2e.overrunning")
def overrunning(wf: pw.Workflow, input: dict[str, Any]) -> str:
    return wf.do("work", "e2e.overrun", input, retries=1, retry_delay="100ms")


# --- parallel steps, atomic steps and compensation -------------------------------------------


def order_row(marker: str) -> None:
    """An ORM write of the step: a demo order naming who wrote it (the tests count them)."""
    from decimal import Decimal

    from project.demo.models import Order

    Order.objects.create(customer=marker, amount=Decimal(1))


@pw.step_function("e2e.reserve", inline=False, atomic=True)
def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    """An atomic queued step: its order row commits with its result, or not at all."""
    record_attempt(data["log"], ctx)
    order_row(f"{ctx.run_id}:{ctx.step_key}")
    time.sleep(data["seconds"])
    return {"attempt": ctx.attempt}


@pw.workflow("e2e.reserved")
def reserved(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    return wf.do("reserve", "e2e.reserve", input)


@pw.workflow("e2e.map")
def mapped(wf: pw.Workflow, input: dict[str, Any]) -> list[dict[str, Any]]:
    """A map of `n` atomic queued steps; each pass of the body is a line in `passes`."""
    with Path(input["passes"]).open("a") as passes:
        passes.write("pass\n")
    items = [{"log": input["log"], "seconds": input["seconds"], "i": i} for i in range(input["n"])]
    return wf.map("item", "e2e.reserve", items)


@pw.step_function("e2e.undo", inline=False, atomic=True)
def undo(data: dict[str, Any], ctx: pw.StepContext) -> None:
    """Undoes a booking: its order row commits once; a slow one works `seconds` first."""
    record_attempt(data["data"]["log"], ctx)
    order_row(f"{ctx.run_id}:{ctx.step_key}")
    if data["data"]["slow"] and ctx.attempt == 1:
        time.sleep(data["data"]["seconds"])


@pw.step_function("e2e.book", compensate="e2e.undo")
def book(data: dict[str, Any], ctx: pw.StepContext) -> bool:
    return data["slow"]


@pw.workflow("e2e.undone")
def undone(wf: pw.Workflow, input: dict[str, Any]) -> None:
    """Books a flight then a hotel, then fails: the hotel is undone first (quickly), then the
    flight (slowly: time to kill the worker between the two undos)."""
    wf.do("flight", "e2e.book", {**input, "slow": True})
    wf.do("hotel", "e2e.book", {**input, "slow": False})
    raise RuntimeError("the trip fell through")


@pw.step_function("e2e.async_fetch", inline=False, timeout="5s")
async def async_fetch(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    """Awaits `seconds` of I/O on the worker's loop: the pid shows which process ran it."""
    await asyncio.sleep(data["seconds"])
    return {"i": data["i"], "pid": os.getpid()}


@pw.step_function("e2e.async_local")
async def async_local(data: int, ctx: pw.StepContext) -> int:
    await asyncio.sleep(0.05)
    return data * 10


@pw.workflow("e2e.async_gather")
def async_gather(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Queued async steps (each on whichever worker takes it) beside in-process ones (awaited
    together in the worker's pass)."""
    fetched = wf.map("fetch", "e2e.async_fetch", [{"i": i, "seconds": 0.05} for i in range(3)])
    local = wf.gather(*(wf.call(f"local{i}", "e2e.async_local", i) for i in range(3)))
    return {"fetched": [item["i"] for item in fetched], "local": local}


def any_item(input: Any, state: Any, payload: Any) -> None:
    """Every `add` is accepted: the test checks what the run does with them, not the validator."""


@pw.workflow("e2e.cart_chain", updates={"add": any_item})
def cart_chain(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    """Takes an `add` update (answered with the item's position) and a `note` signal in turns
    until it holds `input["expect"]` of each, handing over every `input["link"]` steps with what
    it took so far."""
    items, notes = input["items"], input["notes"]
    while len(items) < input["expect"]:
        if wf.history_length >= input["link"]:
            wf.continue_as_new({**input, "items": items, "notes": notes})
        message = wf.receive("add")
        items = [*items, message.payload]
        wf.reply(message, {"position": len(items)})
        notes = [*notes, wf.wait_for_signal("note", "note")]
    return {"items": items, "notes": notes}


pw.define_limit("e2e.vendor", max_running=2)


@pw.step_function("e2e.limited", inline=False, limits=["e2e.vendor"])
def limited(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    """A step under `max_running=2`: logs each attempt, works `seconds` on its first."""
    record_attempt(data["log"], ctx)
    if ctx.attempt == 1:
        time.sleep(data["seconds"])
    return {"attempt": ctx.attempt}


@pw.workflow("e2e.limited_call")
def limited_call(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    return wf.do("call", "e2e.limited", input, retries=3, retry_delay="100ms")
