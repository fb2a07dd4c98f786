"""The test shop: a small order workflow the tests steer (`reserve`, `charge`, `ship`, with a
suspend, a sleep, an approval, a signal wait and a child run on demand), run through the engine
so tests see reachable states; `charge` fails while `broken`, and every call is counted.

The `shop` fixture registers it as `admin_tests.*` (tests/conftest.py) and, for the API tests,
as `api_tests.*` (tests/api/conftest.py), where each run also has the user who started it."""

from __future__ import annotations

from typing import Any

import pikku_workflows as pw
from pikku_workflows.models import WorkflowApproval, WorkflowRun


class Shop:
    """`<prefix>.order`: reserve, charge (fails while `broken`; `retries=` and `retry_delay=`
    of the input), then on demand suspend (`review=`), sleep (`sleep=` a duration), ask for an
    approval (`approval=` `wf.approval`'s options), wait for a signal (`signal=` its name), start
    a child run that sleeps (`invoice=` a duration), and ship."""

    def __init__(self, prefix: str = "admin_tests") -> None:
        self.prefix = prefix
        self.broken = False
        self.calls: list[tuple[str, int]] = []  # (step, attempt) of every call

    @property
    def workflow(self) -> str:
        return f"{self.prefix}.order"

    def register(self) -> None:
        prefix = self.prefix

        @pw.step_function(f"{prefix}.reserve")
        def reserve(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            self.calls.append(("reserve", ctx.attempt))
            return {"reserved": data.get("items", [])}

        @pw.step_function(f"{prefix}.charge")
        def charge(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
            self.calls.append(("charge", ctx.attempt))
            if self.broken:
                raise ConnectionError(f"gateway down (attempt {ctx.attempt})")
            return {"charged": data.get("amount", 5)}

        @pw.step_function(f"{prefix}.ship")
        def ship(data: dict[str, Any], ctx: pw.StepContext) -> str:
            self.calls.append(("ship", ctx.attempt))
            return "shipped"

        @pw.workflow(f"{prefix}.order", planned_steps=["reserve", "charge", "ship"])
        def order(wf: pw.Workflow, input: Any) -> dict[str, Any]:
            input = input if isinstance(input, dict) else {}  # the API starts it with any JSON
            wf.do("reserve", f"{prefix}.reserve", {"items": input.get("items", [])})
            charged = wf.do(
                "charge",
                f"{prefix}.charge",
                {"amount": input.get("amount", 5)},
                retries=input.get("retries", 0),
                retry_delay=input.get("retry_delay", 0),
            )
            if input.get("review"):
                wf.suspend("manual review")
            if input.get("sleep"):
                wf.sleep("cool-off", input["sleep"])
            output: dict[str, Any] = {"charge": charged}
            if input.get("approval") is not None:
                decision = wf.approval("approval", **input["approval"])
                output["approval"] = {"approved": decision.approved, "data": decision.data}
            if input.get("signal"):
                output["signal"] = wf.wait_for_signal("signal", input["signal"])
            if input.get("invoice"):
                wf.do("invoice", f"{prefix}.invoice", {"sleep": input["invoice"]})
            return {**output, "ship": wf.do("ship", f"{prefix}.ship", {})}

        @pw.workflow(f"{prefix}.invoice")
        def invoice(wf: pw.Workflow, input: dict[str, Any]) -> str:
            wf.sleep("render-later", input["sleep"])
            return "INV-1"

    def start(self, user: Any = None, **input: Any) -> WorkflowRun:
        """A new run of `input` (started by `user`), its first pass run here."""
        run_id = pw.start_workflow(self.workflow, input, inline=True, started_by=user)
        return WorkflowRun.objects.get(pk=run_id)

    def failed(self, user: Any = None, **input: Any) -> WorkflowRun:
        """A new run whose `charge` failed (it is `broken` during the pass)."""
        self.broken = True
        try:
            return self.start(user, **input)
        finally:
            self.broken = False

    def awaiting(self, user: Any = None, **options: Any) -> WorkflowApproval:
        """The pending approval of a new run started by `user`, asked with `options` (`input=`
        more input of the run)."""
        input = options.pop("input", {})
        run = self.start(user, approval=options, **input)
        return WorkflowApproval.objects.get(run=run)
