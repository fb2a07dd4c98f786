"""The demo shop's admin: orders, each with the workflow runs about it and a button to start one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from pikku_workflows.admin import WorkflowRunInline

from .models import Order


class OrderRunsInline(WorkflowRunInline):
    """The order's runs; "Start order_fulfilment" offers a run about the order, input prefilled."""

    start_workflows = ("order_fulfilment",)

    def start_input(self, obj: Order, workflow: str) -> Any:
        return {"order_id": obj.pk, "items": ["book"], "amount": float(obj.amount)}


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer", "amount", "created_at")
    search_fields = ("customer",)
    inlines = (OrderRunsInline,)
