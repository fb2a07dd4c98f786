"""The schedule endpoints (docs/http-api.md, "Schedules"): list, create, read, edit, delete,
pause, resume, trigger, backfill and the ticks; each change through the engine's operation,
which checks every field and audits. Reading needs `view_workflowschedule`; creating `add_`,
deleting `delete_`, every other change `change_workflowschedule`."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

import pikku_workflows as pw

from ..models import WorkflowSchedule, WorkflowScheduleTick
from ..schedules.choices import TickOutcome
from .engine_internals import schedule_dict
from .schema import documented, errors
from .views import PikkuAPIMixin, validated

NAME = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="A schedule name."
)
TICKS_SHOWN = 200
# The model permission each action needs.
PERMISSIONS = {
    "list": "view",
    "retrieve": "view",
    "ticks": "view",
    "create": "add",
    "destroy": "delete",
    "partial_update": "change",
    "pause": "change",
    "resume": "change",
    "trigger": "change",
    "backfill": "change",
}


class SchedulePermission(IsAuthenticated):
    def has_permission(self, request: Request, view: Any) -> bool:
        verb = PERMISSIONS.get(view.action or "", "change")
        return super().has_permission(request, view) and request.user.has_perm(
            f"pikku_workflows.{verb}_workflowschedule"
        )


class FireTimeSerializer(serializers.Serializer):
    utc = serializers.DateTimeField()
    local = serializers.DateTimeField()
    dst_note = serializers.CharField()


class ScheduleSerializer(serializers.Serializer):
    name = serializers.CharField()
    workflow = serializers.CharField()
    cron = serializers.CharField(allow_null=True)
    every = serializers.IntegerField(allow_null=True, help_text="Milliseconds.")
    timezone = serializers.CharField()
    input = serializers.JSONField(allow_null=True)
    overlap = serializers.CharField()
    catch_up = serializers.CharField()
    catch_up_window = serializers.IntegerField(help_text="Milliseconds.")
    catch_up_max = serializers.IntegerField()
    jitter = serializers.IntegerField(allow_null=True, help_text="Milliseconds.")
    start_at = serializers.DateTimeField(allow_null=True)
    end_at = serializers.DateTimeField(allow_null=True)
    paused = serializers.BooleanField()
    pause_note = serializers.CharField()
    pause_on_failure = serializers.BooleanField()
    managed_by = serializers.CharField()
    code_differs = serializers.BooleanField()
    next_fire_at = serializers.DateTimeField(allow_null=True)
    last_fired_at = serializers.DateTimeField(allow_null=True)
    last_outcome = serializers.CharField()
    skipped_in_a_row = serializers.IntegerField()
    next_fire_times = FireTimeSerializer(many=True)


class ScheduleFieldsSerializer(serializers.Serializer):
    """A schedule's definition as sent: the engine checks each value (every problem at once)."""

    workflow = serializers.JSONField(required=False)
    cron = serializers.JSONField(required=False)
    every = serializers.JSONField(required=False, help_text='Milliseconds or "90m", "1d".')
    timezone = serializers.JSONField(required=False)
    input = serializers.JSONField(required=False)
    overlap = serializers.JSONField(required=False)
    catch_up = serializers.JSONField(required=False)
    catch_up_window = serializers.JSONField(required=False)
    catch_up_max = serializers.JSONField(required=False)
    jitter = serializers.JSONField(required=False)
    start_at = serializers.JSONField(required=False)
    end_at = serializers.JSONField(required=False)
    pause_on_failure = serializers.JSONField(required=False)


class CreateScheduleSerializer(ScheduleFieldsSerializer):
    name = serializers.CharField()
    paused = serializers.JSONField(required=False)


class PauseSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, default="", allow_blank=True)


class TriggerSerializer(serializers.Serializer):
    force = serializers.BooleanField(required=False, default=False)


class TriggerAnswerSerializer(serializers.Serializer):
    run_id = serializers.UUIDField(allow_null=True, help_text="None: overlap=skip held it.")


class BackfillSerializer(serializers.Serializer):
    start = serializers.JSONField()
    end = serializers.JSONField()
    reprocess = serializers.JSONField(required=False, default="missing")
    max_active = serializers.JSONField(required=False, default=1)
    dry_run = serializers.JSONField(required=False, default=False)


class BackfillAnswerSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    times = serializers.ListField(child=serializers.DateTimeField())
    backfill = serializers.IntegerField(allow_null=True)


class TickSerializer(serializers.Serializer):
    nominal_at = serializers.DateTimeField()
    fired_at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=TickOutcome.choices)
    run_id = serializers.UUIDField(allow_null=True)
    backfill_id = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()


class ScheduleViewSet(PikkuAPIMixin, viewsets.ViewSet):
    """Schedules: their definitions, next fire times and ticks, and what operators do to them."""

    permission_classes = (SchedulePermission,)
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    @transaction.non_atomic_requests
    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().dispatch(request, *args, **kwargs)

    @documented(responses={200: ScheduleSerializer(many=True), **errors()})
    def list(self, request: Request) -> Response:
        return Response([schedule_dict(s) for s in WorkflowSchedule.objects.order_by("name")])

    @documented(
        request=CreateScheduleSerializer, responses={201: ScheduleSerializer, **errors(400)}
    )
    def create(self, request: Request) -> Response:
        body = validated(CreateScheduleSerializer, request.data)
        name, workflow = body.pop("name"), body.pop("workflow", None)
        answer = pw.create_schedule(name, workflow, by=request.user, **body)
        return Response(answer, status=status.HTTP_201_CREATED)

    @documented(parameters=[NAME], responses={200: ScheduleSerializer, **errors(404)})
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(pw.get_schedule(name))

    @documented(
        parameters=[NAME],
        request=ScheduleFieldsSerializer,
        responses={200: ScheduleSerializer, **errors(400, 404)},
    )
    def partial_update(self, request: Request, name: str) -> Response:
        body = validated(ScheduleFieldsSerializer, request.data)
        return Response(pw.update_schedule(name, by=request.user, **body))

    @documented(parameters=[NAME], responses={204: None, **errors(404)})
    def destroy(self, request: Request, name: str) -> Response:
        pw.delete_schedule(name, by=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @documented(
        parameters=[NAME],
        request=PauseSerializer,
        responses={200: ScheduleSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        """Pause: no tick fires until resumed (a paused one stays paused, quietly)."""
        body = validated(PauseSerializer, request.data)
        return Response(pw.pause_schedule(name, note=body["note"], by=request.user))

    @documented(parameters=[NAME], request=None, responses={200: ScheduleSerializer, **errors(404)})
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        """Resume; the ticks missed while paused follow the schedule's catch-up rule."""
        return Response(pw.resume_schedule(name, by=request.user))

    @documented(
        parameters=[NAME],
        request=TriggerSerializer,
        responses={200: TriggerAnswerSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, name: str) -> Response:
        """Start a run now; with overlap=skip and a run still going, none (unless `force`)."""
        body = validated(TriggerSerializer, request.data)
        return Response({"run_id": pw.trigger_schedule(name, force=body["force"], by=request.user)})

    @documented(
        parameters=[NAME],
        request=BackfillSerializer,
        responses={200: BackfillAnswerSerializer, **errors(400, 404)},
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, name: str) -> Response:
        """Start the nominal times in [start, end) after the fact (`dry_run`: count only)."""
        body = validated(BackfillSerializer, request.data)
        return Response(pw.backfill_schedule(name, by=request.user, **body))

    @documented(
        parameters=[
            NAME,
            OpenApiParameter("outcome", OpenApiTypes.STR, enum=TickOutcome.values),
        ],
        responses={200: TickSerializer(many=True), **errors(400, 404)},
    )
    @action(detail=True, methods=["get"])
    def ticks(self, request: Request, name: str) -> Response:
        """The newest ticks (at most 200), with why each was skipped or missed."""
        schedule = WorkflowSchedule.objects.filter(name=name).first()
        if schedule is None:
            raise pw.ScheduleNotFound(name)
        rows = WorkflowScheduleTick.objects.filter(schedule=schedule).order_by("-nominal_at")
        outcome = request.query_params.get("outcome")
        if outcome is not None:
            if outcome not in TickOutcome.values:
                raise pw.InvalidInput(f"outcome must be one of {', '.join(TickOutcome.values)}.")
            rows = rows.filter(outcome=outcome)
        fields = ("nominal_at", "fired_at", "outcome", "run_id", "backfill_id", "reason")
        return Response(list(rows.values(*fields)[:TICKS_SHOWN]))
