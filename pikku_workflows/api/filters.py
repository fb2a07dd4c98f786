"""The run filters of the list, the counts and the bulk operations (one FilterSet for all three),
and the approval filters of the approval list.

Repeatable filters (`status`, `workflow`, `id`) take `?status=a&status=b` and `?status=a,b`
alike (OR). Booleans take `true|false|1|0`. `started_*`/`finished_*` bound a half-open window:
`*_after` is inclusive, `*_before` exclusive, so consecutive windows never count a run twice.
Every value is validated: a malformed one is a 400 `INVALID_INPUT` naming the filter, never an
ignored filter (which, for a bulk operation, would act on more runs than meant).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db.models import QuerySet, Subquery
from django.utils.datastructures import MultiValueDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from ..models import WorkflowApproval, WorkflowRun
from ..querysets import RunLevel
from ..status import ApprovalStatus, RunStatus
from ..waiting import WaitingKind
from .engine_internals import decidable_by

MAX_TEXT = 255


class ListWidget(forms.TextInput):
    """Repeated (`?a=1&a=2`) and comma-separated (`?a=1,2`) values, as one list in order."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        raw = data.getlist(name) if hasattr(data, "getlist") else data.get(name)
        items = raw if isinstance(raw, list) else [] if raw is None else [raw]
        values = [part.strip() for item in items for part in str(item).split(",")]
        return list(dict.fromkeys(value for value in values if value))

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data


class TextListField(forms.Field):
    """A list of non-empty strings, each a valid `item_field` value."""

    widget = ListWidget

    def __init__(self, *args: Any, item_field: forms.Field | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.item_field = item_field or forms.CharField(max_length=MAX_TEXT)

    def clean(self, value: Any) -> list[Any]:
        values = [self.item_field.clean(item) for item in value or []]
        if self.required and not values:
            raise ValidationError(self.error_messages["required"], code="required")
        return values


class ListFilter(django_filters.Filter):
    """`field IN (values)`; an empty list filters nothing."""

    field_class = TextListField

    def __init__(self, *args: Any, item_field: forms.Field | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("lookup_expr", "in")
        super().__init__(*args, **kwargs)
        self.extra["item_field"] = item_field


class StrictBooleanField(forms.Field):
    """`true|false|1|0` (any case) or a JSON boolean; anything else is an error, not ignored."""

    widget = forms.TextInput
    WORDS = {"true": True, "1": True, "false": False, "0": False}

    def to_python(self, value: Any) -> bool | None:
        if value in (None, ""):
            return None
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word not in self.WORDS:
            raise ValidationError("Expected true, false, 1 or 0.", code="invalid")
        return self.WORDS[word]


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class MomentField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 datetime (naive: the current time zone) that the database can compare."""

    def to_python(self, value: Any) -> datetime | None:
        moment = super().to_python(value)
        if moment is not None:
            try:
                moment.astimezone(UTC)
            except OverflowError:
                raise ValidationError("Out of the range of datetimes.", code="invalid") from None
        return moment


class MomentFilter(django_filters.IsoDateTimeFilter):
    field_class = MomentField


class SubjectTypeField(forms.CharField):
    """`app_label.model` of an installed model, as its ContentType."""

    def to_python(self, value: Any) -> ContentType | None:  # type: ignore[override]
        text = super().to_python(value)
        if not text:
            return None
        app_label, _, model = text.lower().partition(".")
        try:
            return ContentType.objects.get_by_natural_key(app_label, model)
        except ContentType.DoesNotExist:
            raise ValidationError(
                "No installed model is called %(name)s (expected app_label.model).",
                code="invalid",
                params={"name": text},
            ) from None


class SubjectTypeFilter(django_filters.Filter):
    field_class = SubjectTypeField


def _array_of(items: dict[str, Any]) -> Any:
    """Document a ListFilter as an array (repeated parameters; commas work too)."""
    return extend_schema_field({"type": "array", "items": items})


class RunFilterSet(django_filters.FilterSet):
    id = _array_of({"type": "string", "format": "uuid"})(
        ListFilter(field_name="id", item_field=forms.UUIDField(), help_text="Run ids (OR).")
    )
    status = _array_of({"type": "string", "enum": RunStatus.values})(
        ListFilter(
            field_name="status",
            item_field=forms.ChoiceField(choices=RunStatus.choices),
            help_text="Run statuses (OR).",
        )
    )
    workflow = _array_of({"type": "string", "maxLength": MAX_TEXT})(
        ListFilter(field_name="workflow", help_text="Workflow names (OR).")
    )
    started_after = MomentFilter(field_name="created_at", lookup_expr="gte")
    started_before = MomentFilter(field_name="created_at", lookup_expr="lt")
    finished_after = MomentFilter(field_name="finished_at", lookup_expr="gte")
    finished_before = MomentFilter(field_name="finished_at", lookup_expr="lt")
    started_by = django_filters.CharFilter(
        method="filter_started_by", max_length=MAX_TEXT, help_text="The starter's username."
    )
    level = django_filters.ChoiceFilter(
        choices=RunLevel.choices,
        method="filter_level",
        help_text="top: top-level runs (the list's default, unless `id`, `parent_run`, "
        "`has_parent` or `q` names runs), children: child runs, all: both.",
    )
    parent_run = django_filters.UUIDFilter(field_name="parent_run_id")
    has_parent = StrictBooleanFilter(field_name="parent_run", lookup_expr="isnull", exclude=True)
    subject_type = extend_schema_field(OpenApiTypes.STR)(
        SubjectTypeFilter(field_name="subject_type", help_text="app_label.model")
    )
    subject_id = django_filters.CharFilter(field_name="subject_id", max_length=MAX_TEXT)
    waiting_on = django_filters.ChoiceFilter(
        choices=[(kind, kind) for kind in WaitingKind.values], method="filter_waiting_on"
    )
    awaiting_approval = StrictBooleanFilter(method="filter_awaiting_approval")
    latest_only = StrictBooleanFilter(
        method="filter_latest_only",
        help_text="true: of each chain of runs that continued as new, its latest run only "
        "(continued runs left out); false: every run.",
    )
    q = django_filters.CharFilter(
        method="filter_search", max_length=MAX_TEXT, help_text="Id prefix or workflow name."
    )
    ordering = django_filters.OrderingFilter(fields=(("created_at", "created_at"),))

    class Meta:
        model = WorkflowRun
        fields: list[str] = []

    def filter_started_by(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        # The starter's id found first (a subquery run once), so the page reads the index of
        # starter and start time instead of joining users to every run.
        user = get_user_model()
        starter = user._default_manager.filter(**{user.USERNAME_FIELD: value}).values("pk")[:1]
        return queryset.filter(started_by_id=Subquery(starter))

    def filter_level(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.at_level(value)  # type: ignore[attr-defined]

    def filter_waiting_on(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.waiting_on(value)  # type: ignore[attr-defined]

    def filter_awaiting_approval(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        return queryset.awaiting_approval(value)  # type: ignore[attr-defined]

    def filter_latest_only(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        return queryset.latest_of_chains() if value else queryset  # type: ignore[attr-defined]

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.matching(value)  # type: ignore[attr-defined]


class RunListFilterSet(RunFilterSet):
    """The run list's (and its counts') filters: top-level runs unless `level` says otherwise,
    like the admin's list, or a filter names runs itself (their children among them). A bulk
    operation's filters (`RunFilterSet`) take every level unless told."""

    NAMING_RUNS = ("id", "parent_run", "has_parent", "q")

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        queryset = super().filter_queryset(queryset)
        given = self.form.cleaned_data
        if given.get("level") or any(
            given.get(name) not in (None, "", []) for name in self.NAMING_RUNS
        ):
            return queryset
        return queryset.at_level(RunLevel.TOP)  # type: ignore[attr-defined]


# Filters a bulk operation takes in its body (`ordering` orders nothing there).
BULK_FILTERS = tuple(name for name in RunFilterSet.base_filters if name != "ordering")


def filters_from_body(body: dict[str, Any]) -> MultiValueDict:
    """A JSON body's filters in the shape of a query string, so they validate the same way:
    strings, numbers and booleans as one value, lists as repeated values."""
    errors: dict[str, list[str]] = {}
    data: dict[str, list[Any]] = {}
    for name, value in body.items():
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str | int | float) for item in items):
            errors[name] = ["Expected a string, a number, a boolean or a list of strings."]
            continue
        data[name] = [_query_value(item) for item in items]
    if errors:
        from rest_framework.exceptions import ValidationError as ApiValidationError

        raise ApiValidationError(errors)
    return MultiValueDict(data)


def _query_value(item: str | float) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    return str(item)


class ApprovalFilterSet(django_filters.FilterSet):
    """`?status=pending&mine=1&run=<uuid>` (docs/http-api.md)."""

    status = _array_of({"type": "string", "enum": ApprovalStatus.values})(
        ListFilter(
            field_name="status",
            item_field=forms.ChoiceField(choices=ApprovalStatus.choices),
            help_text="Approval statuses (OR).",
        )
    )
    mine = StrictBooleanFilter(
        method="filter_mine",
        help_text="true: only those you may decide now (pending, you match the approvers, "
        "hold the decide permission and have not decided yet); false: all but those.",
    )
    run = django_filters.UUIDFilter(field_name="run_id", help_text="The approvals of one run.")

    class Meta:
        model = WorkflowApproval
        fields: list[str] = []

    def filter_mine(self, queryset: QuerySet, name: str, value: bool) -> QuerySet:
        user = self.request.user if self.request is not None else None
        if value:
            return decidable_by(user, queryset)
        return queryset.exclude(pk__in=decidable_by(user).values("pk"))
