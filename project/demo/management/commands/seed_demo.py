"""`manage.py seed_demo`: the demo's superuser (admin/admin), a manager (manager/manager), a
clerk who places orders, and a few orders; one of them waits for a manager's approval in the
inbox (and, once a worker ran it, so does the enterprise signup's onboarding). Safe to run
again."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandError, CommandParser

from pikku_workflows.models import WorkflowRun
from project.demo.models import Order
from project.demo.scenarios import DEMO_ORDERS, DEMO_SIGNUPS, order_input
from project.demo.workflows import APPROVAL_THRESHOLD

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"
MANAGER_USERNAME = "manager"
MANAGER_PASSWORD = "manager"
# Places the large order: four eyes keep them from approving it themselves.
CLERK_USERNAME = "clerk"
MANAGERS_GROUP = "managers"
# What a manager may do in the admin: see runs and approvals, and decide them.
MANAGER_PERMISSIONS = ("view_workflowrun", "view_workflowapproval", "decide_workflowapproval")


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
        clerk = _seed_approvers(admin)
        created = started = 0
        for customer, amount, _ in DEMO_ORDERS:
            order, was_created = Order.objects.get_or_create(
                customer=customer, defaults={"amount": amount}
            )
            created += was_created
            started += _start_fulfilment(order, admin, clerk)
        queued = " (queued for the worker; the large order waits for a manager in the inbox)"
        self.stdout.write(
            f"Demo orders: {created} created, {len(DEMO_ORDERS) - created} already there; "
            f"{_started(started, len(DEMO_ORDERS), 'fulfilment')}{queued if started else ''}."
        )
        started = sum(
            _start_onboarding(number, signup, admin)
            for number, signup in enumerate(DEMO_SIGNUPS, start=1)
        )
        self.stdout.write(
            f"Demo signups: {_started(started, len(DEMO_SIGNUPS), 'onboarding graph')}."
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Admin login: username {ADMIN_USERNAME!r}, password {ADMIN_PASSWORD!r}"
                " (unless you changed it)."
            )
        )
        self.stdout.write(
            f"Managers ({ADMIN_USERNAME!r}, and {MANAGER_USERNAME!r} with password "
            f"{MANAGER_PASSWORD!r}) approve orders above {APPROVAL_THRESHOLD} in the approvals "
            "inbox."
        )


def _seed_approvers(admin: Any) -> Any:
    """The managers group (admin and the manager in it) and the clerk; returns the clerk."""
    user_model = get_user_model()
    managers, _ = Group.objects.get_or_create(name=MANAGERS_GROUP)
    managers.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="pikku_workflows", codename__in=MANAGER_PERMISSIONS
        )
    )
    manager = user_model._default_manager.filter(username=MANAGER_USERNAME).first()
    if manager is None:
        manager = user_model._default_manager.create_user(
            MANAGER_USERNAME, "manager@example.com", MANAGER_PASSWORD, is_staff=True
        )
    clerk = user_model._default_manager.filter(username=CLERK_USERNAME).first()
    if clerk is None:
        clerk = user_model._default_manager.create_user(CLERK_USERNAME, "clerk@example.com")
    managers.user_set.add(admin, manager)
    return clerk


def _started(started: int, total: int, what: str) -> str:
    """`2 fulfilment runs started, 4 already there`: the counts of this seed, exact."""
    counted = f"{started} {what} run{'' if started == 1 else 's'} started"
    return f"{counted}, {total - started} already there" if started < total else counted


def _start_once(workflow: str, input: Any, key: str, **options: Any) -> bool:
    """Start the run unless one with this idempotency key exists; whether it started one."""
    import pikku_workflows as pw

    if WorkflowRun.objects.filter(workflow=workflow, idempotency_key=key).exists():
        return False
    pw.start_workflow(workflow, input, idempotency_key=key, **options)
    return True


def _start_fulfilment(order: Order, admin: Any, clerk: Any) -> bool:
    """Start the order's fulfilment run, once.

    Runs are queued for the worker, except a large order: the clerk places it and its first
    pass runs here, so the approval it waits for is in the inbox before any worker starts.
    """
    large = order.amount > APPROVAL_THRESHOLD
    return _start_once(
        "order_fulfilment",
        order_input(order),
        f"demo-order-{order.pk}",
        inline=large,
        started_by=clerk if large else admin,
        subject=order,
    )


def _start_onboarding(number: int, signup: dict[str, Any], started_by: Any) -> bool:
    """Queue a signup's onboarding graph run, once, like the orders."""
    return _start_once("onboarding", signup, f"demo-signup-{number}", started_by=started_by)
