"""Cursor pagination of the run and approval lists on (created_at, id): stable under inserts, no
COUNT query."""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

DEFAULT_ORDERING = ("-created_at", "-id")


class RunCursorPagination(CursorPagination):
    """Newest first unless the `ordering` filter says `created_at`; ties on the creation moment
    are broken by id, so every run has one place in the order."""

    ordering = DEFAULT_ORDERING
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        # The FilterSet's `ordering` filter has ordered the queryset already; follow it.
        chosen = [str(field) for field in queryset.query.order_by]
        if chosen and chosen[0].lstrip("-") == "created_at":
            descending = chosen[0].startswith("-")
            return ("-created_at", "-id") if descending else ("created_at", "id")
        return DEFAULT_ORDERING

    def decode_cursor(self, request: Request) -> Cursor | None:
        # DRF answers a malformed cursor with 404; it is bad input. A cursor whose position is
        # not a moment would reach the query and fail there.
        try:
            cursor = super().decode_cursor(request)
        except NotFound as exc:
            raise ValidationError({self.cursor_query_param: [self.invalid_cursor_message]}) from exc
        if cursor is not None and cursor.position is not None:
            try:
                moment = parse_datetime(cursor.position)
            except ValueError:
                moment = None
            if moment is None:
                raise ValidationError({self.cursor_query_param: [self.invalid_cursor_message]})
        return cursor


class ApprovalCursorPagination(RunCursorPagination):
    """Approvals newest first, ties broken by id (the list has no `ordering` filter)."""

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        return DEFAULT_ORDERING
