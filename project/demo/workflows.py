"""The demo shop's workflows: an order fulfilment with a manager's approval above a threshold,
retries, a compensation, a child run, a durable timer and a manual-review suspend; and a
customer onboarding graph."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pikku_workflows as pw

# Orders above this amount wait for a manager's approval before the card is charged.
APPROVAL_THRESHOLD = 500


class PaymentDeclined(Exception):
    pass


@pw.step_function("shop.reserve_stock")
def reserve_stock(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"reserved": data["items"], "reservation": ctx.invocation_id}


@pw.step_function("shop.release_stock")
def release_stock(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"released": data["items"]}


@pw.step_function("shop.charge_card", inline=False, timeout="4m")
def charge_card(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    # Demo knobs: fail the first `declines` attempts; work `work_seconds` (time to kill a worker).
    time.sleep(data.get("work_seconds", 0))
    if ctx.attempt <= data.get("declines", 0):
        raise PaymentDeclined(f"card declined (attempt {ctx.attempt})")
    # The invocation id is stable across attempts: a real gateway would dedupe on it.
    return {"charge_id": f"ch_{ctx.invocation_id[:8]}", "amount": data["amount"]}


@pw.step_function("shop.refund")
def refund(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"refunded": True, "because": data["error"]["message"]}


@pw.step_function("shop.render_invoice")
def render_invoice(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"invoice_no": f"INV-{data['order_id']:05d}", "total": data["amount"]}


@pw.step_function("shop.ship", inline=False)
def ship(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"tracking": f"TRK{data['order_id']:06d}"}


@pw.workflow("invoice", planned_steps=["render"])
def invoice(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    return wf.do("render", "shop.render_invoice", input)


@pw.workflow(
    "order_fulfilment",
    planned_steps=["reserve", "manager-approval", "charge", "invoice", "cool-off", "ship"],
)
def order_fulfilment(wf: pw.Workflow, input: dict[str, Any]) -> dict[str, Any]:
    wf.do("reserve", "shop.reserve_stock", {"items": input["items"]})
    amount = input["amount"]
    if amount > APPROVAL_THRESHOLD:
        decision = wf.approval(
            "manager-approval",
            approvers=["group:managers"],
            exclude_requester=True,  # four eyes: whoever placed the order cannot approve it
            expires_in=input.get("approval_expires_in", "2d"),
            on_expire="reject",
            remind_every="1d",
            form="project.demo.forms.ManagerDecision",
            summary=f"Order #{input['order_id']} for {amount:.2f} needs a manager's approval",
            data={"order_id": input["order_id"], "amount": amount, "items": input["items"]},
        )
        if not decision.approved:
            wf.do("release", "shop.release_stock", {"items": input["items"]})
            return {"status": decision.status, "by": decision.decided_by, "why": decision.comment}
        amount = round(amount * (100 - (decision.data.get("discount_percent") or 0)) / 100, 2)
    charge = wf.do(
        "charge",
        "shop.charge_card",
        {
            "amount": amount,
            "declines": input.get("declines", 0),
            "work_seconds": input.get("work_seconds", 0),
        },
        retries=input.get("charge_retries", 3),
        retry_delay="1s",
        on_error="shop.refund",
    )
    wf.set_state("stage", "charged")
    bill = wf.do("invoice", "invoice", {"order_id": input["order_id"], "amount": amount})
    wf.sleep("cool-off", input.get("cool_off", "3s"))
    if input.get("needs_review"):
        wf.suspend("manual review")
    shipment = wf.do("ship", "shop.ship", {"order_id": input["order_id"]})
    wf.set_state("stage", "shipped")
    return {"charge": charge["charge_id"], "invoice": bill["invoice_no"], **shipment}


# --- Onboarding: a graph workflow, defined as data in onboarding.json --------------------------
# A branch (route: vip or standard), a fan-out and its join (crm and billing, then route), an
# approval node (manager_ok: a manager assigns an enterprise customer an account manager), a
# for_each (invite, one team at a time) and an on_error node (alert_sales).


class SignupRejected(Exception):
    pass


@pw.step_function("onboarding.validate")
def validate_signup(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    if "@" not in data.get("email", ""):
        raise SignupRejected(f"not an email address: {data.get('email')!r}")
    return {
        "user": {"name": data["name"], "email": data["email"]},
        "plan": data.get("plan", "standard"),
        "teams": data.get("teams", []),
    }


@pw.step_function("onboarding.create_crm_contact", inline=False)
def create_crm_contact(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    # The invocation id is stable across attempts: a real CRM would dedupe on it.
    return {"contact_id": f"crm_{ctx.invocation_id[:8]}"}


@pw.step_function("onboarding.open_billing_account")
def open_billing_account(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"account": f"acct_{ctx.invocation_id[:8]}", "plan": data["plan"]}


@pw.step_function("onboarding.classify")
def classify(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    tier = "vip" if data["plan"] == "enterprise" else "standard"
    ctx.branch(tier)
    ctx.set_state("tier", tier)
    return {"tier": tier}


@pw.step_function("onboarding.send_email")
def send_email(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"sent_to": data["to"], "subject": data["subject"]}


@pw.step_function("onboarding.invite_team")
def invite_team(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"invited": data["team"], "by": data["by"]}


@pw.step_function("onboarding.alert_sales")
def alert_sales(data: dict[str, Any], ctx: pw.StepContext) -> dict[str, Any]:
    return {"alerted": True, "because": data["error"]["message"]}


pw.graph_workflow_from_file(Path(__file__).with_name("onboarding.json"))
