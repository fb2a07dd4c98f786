"""The demo's orders and signups, each showing one behaviour in the admin, and the input an
order's fulfilment run takes (the seeded run's, and the one "Start order_fulfilment" prefills)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

# Long enough to find the worker's pid and kill it mid-charge (the step's timeout is longer).
SLOW_CHARGE_SECONDS = 180

# Each demo order's fulfilment shows one behaviour in the admin.
DEMO_ORDERS: tuple[tuple[str, Decimal, dict[str, Any]], ...] = (
    ("Ada Lovelace", Decimal("42.00"), {}),  # runs straight through
    ("Grace Hopper", Decimal("99.50"), {"declines": 1}),  # the card is declined once, retried
    ("Alan Turing", Decimal("12.00"), {"declines": 9, "charge_retries": 1}),  # fails, refunds
    ("Barbara Liskov", Decimal("250.00"), {"needs_review": True}),  # suspended: resume it
    # Slow: kill its worker mid-charge.
    ("Edsger Dijkstra", Decimal("7.00"), {"work_seconds": SLOW_CHARGE_SECONDS}),
    # Above APPROVAL_THRESHOLD: waits for a manager in the approvals inbox (placed by the clerk).
    ("Margaret Hamilton", Decimal("1200.00"), {}),
)
# Each demo signup's onboarding graph takes another branch of `route`.
DEMO_SIGNUPS: tuple[dict[str, Any], ...] = (
    {"name": "Katherine Johnson", "email": "katherine@example.com", "plan": "enterprise"},
    {"name": "Linus Torvalds", "email": "linus@example.com", "teams": ["kernel", "git"]},
)


def order_input(order: Any) -> dict[str, Any]:
    """The fulfilment input of `order`, with its demo scenario's knobs (a slow charge, declines)
    when it is one of the demo's orders: a run started again from its page shows the same."""
    scenario = next((knobs for name, _, knobs in DEMO_ORDERS if name == order.customer), {})
    return {"order_id": order.pk, "items": ["book"], "amount": float(order.amount), **scenario}
