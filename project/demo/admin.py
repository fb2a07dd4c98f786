"""The demo shop's admin: orders, each with the workflow runs about it and a button to start one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from pikku_workflows.admin import WorkflowRunInline

from .models import Order
from .scenarios import order_input


class OrderRunsInline(WorkflowRunInline):
    """The order's runs; "Start order_fulfilment" offers a run about the order, its input
    prefilled with the order's demo scenario (the slow order's charge is slow again)."""

    start_workflows = ("order_fulfilment",)

    def start_input(self, obj: Order, workflow: str) -> Any:
        return order_input(obj)


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer", "amount", "created_at")
    search_fields = ("customer",)
    inlines = (OrderRunsInline,)
