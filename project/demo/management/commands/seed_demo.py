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
DEMO_ORDERS = (("Ada Lovelace", Decimal("42.00")), ("Grace Hopper", Decimal("99.50")))


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
        created = 0
        for customer, amount in DEMO_ORDERS:
            _, was_created = Order.objects.get_or_create(
                customer=customer, defaults={"amount": amount}
            )
            created += was_created
        self.stdout.write(
            f"Demo orders: {created} created, {len(DEMO_ORDERS) - created} already there."
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin login: username {ADMIN_USERNAME!r}, password {ADMIN_PASSWORD!r}"
                " (unless you changed it)."
            )
        )
