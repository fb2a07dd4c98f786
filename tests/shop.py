"""A small order workflow the tests steer (`reserve`, `charge`, `ship`, with a suspend, a sleep
and a child run on demand), run through the engine so tests see reachable states; `charge`
fails while `broken`, and every call is counted. The `shop` fixture (tests/conftest.py)
registers it."""

from __future__ import annotations

from typing import Any

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun


class Shop:
    """A small order workflow whose steps the tests steer: `charge` fails while `broken`."""

    def __init__(self) -> None:
        self.broken = False
        self.calls: list[tuple[str, int]] = []  # (step, attempt) of every call

    def register(self) -> None:
        @pw.step_function("admin_tests.reserve")
        def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            self.calls.append(("reserve", ctx.attempt))
            return {"reserved": data.get("items", [])}

        @pw.step_function("admin_tests.charge")
        def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            self.calls.append(("charge", ctx.attempt))
            if self.broken:
                raise ConnectionError(f"gateway down (attempt {ctx.attempt})")
            return {"charged": data.get("amount", 5)}

        @pw.step_function("admin_tests.ship")
        def ship(data: dict[str, Any], ctx: pw.StepContext) -> str:
            self.calls.append(("ship", ctx.attempt))
            return "shipped"

        @pw.workflow("admin_tests.order", planned_steps=["reserve", "charge", "ship"])
        def order(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
            wf.do("reserve", "admin_tests.reserve", {"items": input.get("items", [])})
            charged = wf.do(
                "charge",
                "admin_tests.charge",
                {"amount": input.get("amount", 5)},
                retries=input.get("retries", 0),
                retry_delay=input.get("retry_delay", 0),
            )
            if input.get("review"):
                wf.suspend("manual review")
            if input.get("sleep"):
                wf.sleep("cool-off", input["sleep"])
            if input.get("invoice"):
                wf.do("invoice", "admin_tests.invoice", {"sleep": input["invoice"]})
            return {"charge": charged, "ship": wf.do("ship", "admin_tests.ship", {})}

        @pw.workflow("admin_tests.invoice")
        def invoice(wf: pw.Workflow, input: dict[str, Any]) -> str:
            wf.sleep("render-later", input["sleep"])
            return "INV-1"

    def start(self, **input: Any) -> WorkflowRun:
        run_id = pw.start_workflow("admin_tests.order", input, inline=True)
        return WorkflowRun.objects.get(pk=run_id)

    def failed(self, **input: Any) -> WorkflowRun:
        self.broken = True
        try:
            return self.start(**input)
        finally:
            self.broken = False
