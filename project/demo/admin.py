"""The demo shop's admin: orders, each with the workflow runs about it."""

from __future__ import annotations

from django.contrib import admin

from pikku_workflows.admin import WorkflowRunInline

from .models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer", "amount", "created_at")
    search_fields = ("customer",)
    inlines = (WorkflowRunInline,)
