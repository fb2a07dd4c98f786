"""`trip.*`: a workflow whose bookings each have a compensation, for the tests of compensation
in the engine and in the adapters that offer it (admin, API, `pikku`)."""

from __future__ import annotations

import pikku_workflows as pw


def register_trips() -> dict:
    """`trip.*`: a flight, a hotel and a car booked in turn (the car fails when asked to); each
    booking undone by its cancel. `log` lists every booking and undo in order."""
    state: dict = {"log": [], "refuse_undo": 0}

    def undo(data: dict, ctx: pw.StepContext) -> str:
        if state["refuse_undo"]:
            state["refuse_undo"] -= 1
            raise RuntimeError("the airline's API is down")
        state["log"].append(f"undo {data['result']['booking']}")
        return f"undone {data['data']['what']}"

    pw.step_function("trip.unbook")(undo)

    @pw.step_function("trip.book", compensate="trip.unbook")
    def book(data: dict, ctx: pw.StepContext) -> dict:
        if data.get("fail"):
            raise RuntimeError(f"no {data['what']} left")
        state["log"].append(f"book {data['what']}")
        return {"booking": f"{data['what']}-1"}

    @pw.step_function("trip.notify")
    def notify(data: dict, ctx: pw.StepContext) -> None:
        state["log"].append("notify")

    @pw.step_function("trip.alert")
    def alert(data: dict, ctx: pw.StepContext) -> None:
        state["log"].append("on_error")

    @pw.workflow("trip.plan")
    def plan(wf: pw.Workflow, input: dict) -> str:
        wf.do("flight", "trip.book", {"what": "flight"})
        wf.do("hotel", "trip.book", {"what": "hotel"})
        wf.do("notify", "trip.notify")  # no compensation declared: nothing to undo
        if input.get("wait"):
            wf.wait_for_signal("go", "go")
        wf.do(
            "car",
            "trip.book",
            {"what": "car", "fail": input.get("no_car")},
            retries=0,
            on_error="trip.alert",
        )
        return "booked"

    return state
