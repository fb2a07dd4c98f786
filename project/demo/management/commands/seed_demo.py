"""`manage.py seed_demo`: the demo's superuser (admin/admin) and a few orders; safe to run again."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from project.demo.models import Order

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"
# Each demo order's fulfilment shows one behaviour in the admin.
DEMO_ORDERS: tuple[tuple[str, Decimal, dict[str, Any]], ...] = (
    ("Ada Lovelace", Decimal("42.00"), {}),  # runs straight through
    ("Grace Hopper", Decimal("99.50"), {"declines": 1}),  # the card is declined once, retried
    ("Alan Turing", Decimal("12.00"), {"declines": 9, "charge_retries": 1}),  # fails, refunds
    ("Barbara Liskov", Decimal("250.00"), {"needs_review": True}),  # suspended: resume it
    ("Edsger Dijkstra", Decimal("7.00"), {"work_seconds": 30}),  # slow: kill the worker now
)
# Each demo signup's onboarding graph takes another branch of `route`.
DEMO_SIGNUPS: tuple[dict[str, Any], ...] = (
    {"name": "Katherine Johnson", "email": "katherine@example.com", "plan": "enterprise"},
    {"name": "Linus Torvalds", "email": "linus@example.com", "teams": ["kernel", "git"]},
)


class Command(BaseCommand):
    help = "Create the demo superuser (admin/admin) and demo orders, if missing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--force", action="store_true", help="Seed even with DEBUG off (never in production)."
        )

    def handle(self, *args: Any, force: bool = False, **options: Any) -> None:
        # A superuser with a well-known password must not land in a real deployment by accident.
        if not settings.DEBUG and not force:
            raise CommandError("DEBUG is off: refusing to create admin/admin (use --force).")
        user_model = get_user_model()
        if user_model._default_manager.filter(username=ADMIN_USERNAME).exists():
            self.stdout.write(f"Superuser {ADMIN_USERNAME!r} exists (its password was left as is).")
        else:
            user_model._default_manager.create_superuser(
                ADMIN_USERNAME, "admin@example.com", ADMIN_PASSWORD
            )
            self.stdout.write(self.style.SUCCESS(f"Created superuser {ADMIN_USERNAME!r}."))
        admin = user_model._default_manager.get(username=ADMIN_USERNAME)
        created = 0
        for customer, amount, scenario in DEMO_ORDERS:
            order, was_created = Order.objects.get_or_create(
                customer=customer, defaults={"amount": amount}
            )
            created += was_created
            _start_fulfilment(order, scenario, admin)
        self.stdout.write(
            f"Demo orders: {created} created, {len(DEMO_ORDERS) - created} already there; "
            "their fulfilment runs are queued for the worker."
        )
        for number, signup in enumerate(DEMO_SIGNUPS, start=1):
            _start_onboarding(number, signup, admin)
        self.stdout.write(f"Demo signups: {len(DEMO_SIGNUPS)} onboarding graph runs queued.")
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin login: username {ADMIN_USERNAME!r}, password {ADMIN_PASSWORD!r}"
                " (unless you changed it)."
            )
        )


def _start_fulfilment(order: Order, scenario: dict[str, Any], started_by: Any) -> None:
    """Queue the order's fulfilment run (once: the idempotency key makes a re-seed a no-op)."""
    import pikku_workflows as pw

    pw.start_workflow(
        "order_fulfilment",
        {"order_id": order.pk, "items": ["book"], "amount": float(order.amount), **scenario},
        idempotency_key=f"demo-order-{order.pk}",
        started_by=started_by,
        subject=order,
    )


def _start_onboarding(number: int, signup: dict[str, Any], started_by: Any) -> None:
    """Queue a signup's onboarding graph run (once, like the orders)."""
    import pikku_workflows as pw

    pw.start_workflow(
        "onboarding", signup, idempotency_key=f"demo-signup-{number}", started_by=started_by
    )
