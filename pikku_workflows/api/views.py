"""The API's views: workflow definitions (list, detail, start a run) and runs (list, counts,
detail, timeline, state, live events, operations, signals, bulk operations). Approvals are in
`approvals`.

Views parse and check requests and answer the engine's own dicts: every state change is a
`pw.*` operation (which validates, writes and audits), every read of one run a `pw.*` read.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_permission_codename
from django.core.handlers.asgi import ASGIRequest
from django.db import transaction
from django.db.models import Count, QuerySet
from django_filters import utils as filter_utils
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.serializers import Serializer

import pikku_workflows as pw

from ..models import WorkflowLimit, WorkflowRun
from ..observability.tracing import caller_context
from ..registry import WorkflowDefinition, registry
from . import bulk
from .engine_internals import (
    HOLD,
    HOLD_PERMISSION,
    OPERATION_RULES,
    RELEASE,
    Rule,
    get_limit,
    list_limits,
    list_rows,
    list_summary,
    start_run,
    update_limit,
)
from .errors import exception_handler
from .events import (
    EventStreamRenderer,
    EventStreamResponse,
    RunEventStream,
    async_stream,
    sync_stream,
)
from .filters import BULK_FILTERS, RunFilterSet, RunListFilterSet, filters_from_body
from .pagination import RunCursorPagination
from .parsers import StrictJSONParser
from .permissions import (
    RunPermission,
    idempotency_scope,
    purged_run_visible,
    sees_every_run,
    visible_run_id,
    visible_runs,
)
from .run_counts import stored_counts
from .schema import SIGNAL_ERRORS, UPDATE_ERRORS, documented, errors
from .serializers import (
    MAX_SIGNAL_NAME,
    BulkResultSerializer,
    BulkSerializer,
    CountsQuerySerializer,
    CountsSerializer,
    DefinitionDetailSerializer,
    DefinitionSerializer,
    EventsQuerySerializer,
    ForkSerializer,
    LimitSerializer,
    LimitUpdateSerializer,
    ListQuerySerializer,
    OperationSerializer,
    RunListItemSerializer,
    RunStateSerializer,
    RunSummarySerializer,
    SignalSerializer,
    StartRunSerializer,
    StateQuerySerializer,
    TimelineEventSerializer,
    UpdateAnswerSerializer,
    UpdateSerializer,
    bulk_option_names,
    bulk_options_serializer,
    operation_serializer,
)
from .stream_slots import stream_slots

# One Server-Sent Event as schema checkers read a text/event-stream body.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {
            "type": "string",
            "enum": ["summary", "timeline", "continued", "end", "error"],
        },
        "data": {
            "type": "string",
            "description": "JSON: a run summary, a timeline event, or the successor (`continued`).",
        },
        "id": {"type": "string", "description": "The seq of the last event this one covers."},
    },
    "required": ["event", "data"],
}
RUN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="A run id.")
SIGNAL_NAME = OpenApiParameter(
    "name",
    {"type": "string", "minLength": 1, "maxLength": MAX_SIGNAL_NAME},
    OpenApiParameter.PATH,
    description="The signal's name, as the run's `wf.wait_for_signal` waits for it.",
)
UPDATE_NAME = OpenApiParameter(
    "name",
    {"type": "string", "minLength": 1, "maxLength": MAX_SIGNAL_NAME},
    OpenApiParameter.PATH,
    description="The update's name, as the workflow's `updates=` declares it.",
)


def validated(serializer_class: type[Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class PikkuAPIMixin:
    """What every view of the API shares, whatever the host's REST_FRAMEWORK defaults say (the
    host's authentication classes are kept)."""

    permission_classes: tuple[type, ...] = (RunPermission,)
    parser_classes: tuple[type, ...] = (StrictJSONParser,)
    renderer_classes: tuple[type, ...] = (JSONRenderer,)
    schema = AutoSchema()

    def get_exception_handler(self) -> Any:
        return exception_handler

    def required_permission(self) -> str | None:
        """The codename of the model permission the current action needs, if any."""
        return None


def definition_data(definition: WorkflowDefinition, *, detail: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": definition.name,
        "kind": definition.kind,
        "version_hash": definition.code_version,
        "planned_steps": definition.planned_steps,
    }
    if detail:
        # A graph workflow's definition as written (JSON); Python workflows have none.
        data["definition"] = definition.graph.source if definition.graph is not None else None
    return data


class DefinitionViewSet(PikkuAPIMixin, viewsets.ViewSet):
    """The registered workflows, and starting a run of one."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"  # names have dots ("payments.charge")

    def required_permission(self) -> str | None:
        return get_permission_codename("add", WorkflowRun._meta) if self.action == "runs" else None

    @documented(responses={200: DefinitionSerializer(many=True), **errors()})
    def list(self, request: Request) -> Response:
        definitions = sorted(registry.workflows.values(), key=lambda d: d.name)
        return Response([definition_data(definition) for definition in definitions])

    @documented(responses={200: DefinitionDetailSerializer, **errors(404)})
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(definition_data(registry.get_workflow(name), detail=True))

    @documented(
        request=StartRunSerializer,
        responses={
            201: RunSummarySerializer,
            200: OpenApiResponse(
                RunSummarySerializer,
                description="The idempotency key's run, or the debounced run the start joined.",
            ),
            **errors(400, 404, 409, 410, 413),
        },
    )
    @action(detail=True, methods=["post"])
    def runs(self, request: Request, name: str) -> Response:
        """Start a run (queued: a worker executes it); `started_by` is you."""
        body = validated(StartRunSerializer, request.data)
        key = body["idempotency_key"]
        with caller_context(request.headers.get("traceparent")):
            run_id, created = start_run(
                name,
                body["input"],
                idempotency_key=key,
                started_by=request.user,
                scope=idempotency_scope(request) if key is not None else "",
            )
        if not created and not visible_runs(request).filter(pk=run_id).exists():
            if purged_run_visible(request, run_id):
                raise pw.RunPurged(run_id)
            # The key names a run this user may not see: saying so would show it.
            raise pw.IdempotencyConflict(name, key)
        summary = pw.get_run_status(run_id)
        headers = {
            "Location": reverse("pikku_workflows_api:run-detail", args=[run_id], request=request)
        }
        answer = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(summary, status=answer, headers=headers)


def list_item(run: WorkflowRun, include: list[str]) -> dict[str, Any]:
    """A run's list item, from its row alone; `include` adds `input` and `output`."""
    item = list_summary(run)
    for field in include:
        item[field] = getattr(run, field)
    return item


def operation_route(rule: Rule) -> Callable[..., Response]:
    """`POST runs/{id}/<action>/` for a bulk operation of the table: its function on the run,
    answering the run's summary. (Fork, which takes a step and starts a run, has its own.)"""

    body_serializer = operation_serializer(rule)

    def operate(self: RunViewSet, request: Request, pk: str) -> Response:
        run_id = self.run_id()
        body = validated(body_serializer, request.data)
        flags = {flag.name: body[flag.name] for flag in rule.flags}
        return Response(rule.function(run_id, reason=body["reason"], by=request.user, **flags))

    operate.__name__ = operate.__qualname__ = rule.action
    route = action(detail=True, methods=["post"])(operate)
    return documented(
        parameters=[RUN_ID],
        request=body_serializer,
        responses={200: RunSummarySerializer, **errors(400, 403, 404, 409, 410, 413)},
    )(route)


def with_operation_routes(viewset: type[RunViewSet]) -> type[RunViewSet]:
    """Give the run views a route per bulk operation of the table (`cancel`, `suspend`, ...)."""
    for rule in bulk.RULES.values():
        setattr(viewset, rule.action, operation_route(rule))
    return viewset


@with_operation_routes
class RunViewSet(PikkuAPIMixin, viewsets.GenericViewSet):
    """Runs you may see: yours, or every run with `view_workflowrun` (narrowed by the host's
    RUN_QUERYSET_FILTER). A run you may not see answers 404 everywhere below it."""

    lookup_value_regex = "[^/]+"
    permissions_per_run = True
    filter_backends = (DjangoFilterBackend,)
    filterset_class = RunListFilterSet
    pagination_class = RunCursorPagination

    @classmethod
    def as_view(cls, actions: dict[str, str] | None = None, **initkwargs: Any) -> Any:
        view = super().as_view(actions, **initkwargs)
        if actions and {"signals", "updates"} & set(actions.values()):
            # The engine commits a refused signal's `deny` row before it answers 403:
            # ATOMIC_REQUESTS' rollback of the request would undo it.
            view = transaction.non_atomic_requests(view)
        return view

    def get_queryset(self) -> QuerySet[WorkflowRun]:
        return visible_runs(self.request)

    def required_permission(self) -> str | None:
        if self.action in (HOLD, RELEASE):
            return HOLD_PERMISSION
        # A run's operation routes are named after their row of the operations table.
        rule = OPERATION_RULES.get(self.action or "")
        if self.action == "bulk":
            rule = bulk.RULES.get(self.kwargs.get("operation", ""))
        return rule.permission if rule is not None else None

    def run_id(self) -> uuid.UUID:
        """The run of the URL: visible (else 404), then the action's permission (else 403)."""
        run_id = visible_run_id(self.request, self.kwargs["pk"])
        self.check_object_permissions(self.request, run_id)
        return run_id

    @documented(
        parameters=[ListQuerySerializer],
        responses={200: RunListItemSerializer(many=True), **errors(400)},
    )
    def list(self, request: Request) -> Response:
        include = validated(ListQuerySerializer, request.query_params).get("include", [])
        page = self.paginate_queryset(
            list_rows(self.filter_queryset(self.get_queryset()), *include)
        )
        return self.get_paginated_response([list_item(run, include) for run in page or []])

    @documented(
        parameters=[CountsQuerySerializer], responses={200: CountsSerializer, **errors(400)}
    )
    @action(detail=False, methods=["get"])
    def counts(self, request: Request) -> Response:
        group_by = validated(CountsQuerySerializer, request.query_params).get("group_by", [])
        filterset = RunListFilterSet(request.query_params, self.get_queryset(), request=request)
        if not filterset.is_valid():
            raise filter_utils.translate_validation(filterset.errors)
        if sees_every_run(request):
            stored = stored_counts(filterset, group_by)
            if stored is not None:
                return Response(stored)
        runs = filterset.qs.order_by()
        if not group_by:
            return Response({"total": runs.count(), "groups": []})
        # COUNT(*), not of a column: the index of status, workflow and parent answers it alone.
        groups = list(runs.values(*group_by).annotate(count=Count("*")).order_by(*group_by))
        return Response({"total": sum(group["count"] for group in groups), "groups": groups})

    @documented(parameters=[RUN_ID], responses={200: RunSummarySerializer, **errors(404, 410)})
    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(pw.get_run_status(self.run_id()))

    @documented(
        parameters=[RUN_ID],
        responses={200: TimelineEventSerializer(many=True), **errors(404, 410)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=())
    def timeline(self, request: Request, pk: str) -> Response:
        return Response(pw.get_run_timeline(self.run_id()))

    @documented(
        parameters=[RUN_ID, StateQuerySerializer],
        responses={200: RunStateSerializer, **errors(400, 404, 410)},
    )
    @action(detail=True, methods=["get"])
    def state(self, request: Request, pk: str) -> Response:
        at = validated(StateQuerySerializer, request.query_params).get("at")
        return Response(pw.reconstruct_run_state(self.run_id(), at))

    @documented(
        parameters=[
            RUN_ID,
            EventsQuerySerializer,
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.INT,
                OpenApiParameter.HEADER,
                description="Resume after this seq (EventSource sends it on reconnect).",
            ),
        ],
        responses={
            (200, EventStreamRenderer.media_type): OpenApiResponse(
                SSE_EVENT,
                description="A stream of events: `summary` (the run summary; `id:` the last "
                "seq it covers on a fresh connection), then one `timeline` event per timeline "
                "event (`id:` its seq), then `end` (the final summary) once the run has ended; "
                "a run that continued as new sends `continued` (`run_id`, `continued_to`: its "
                "successor) just before `end`. A comment line every 15 s keeps the connection "
                "open.",
            ),
            **errors(400, 404, 410),
            **{
                (status, EventStreamRenderer.media_type): OpenApiResponse(
                    SSE_EVENT, description="The error as one `error` event (data: the JSON error)."
                )
                for status in (400, 401, 403, 404, 410)
            },
        },
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, EventStreamRenderer])
    def events(self, request: Request, pk: str) -> EventStreamResponse:
        run_id = self.run_id()
        resumed = request.headers.get("Last-Event-ID", request.query_params.get("last_event_id"))
        query = {} if resumed in (None, "") else {"last_event_id": resumed}
        stream = RunEventStream(
            run_id, validated(EventsQuerySerializer, query).get("last_event_id")
        )
        slot = stream_slots.take()  # else 503 with Retry-After
        is_asgi = isinstance(request._request, ASGIRequest)
        content = async_stream(stream, slot) if is_asgi else sync_stream(stream, slot)
        return EventStreamResponse(content, slot)

    @documented(
        parameters=[RUN_ID],
        request=ForkSerializer,
        responses={
            200: OpenApiResponse(RunSummarySerializer, description="The new run's summary."),
            **errors(400, 403, 404, 409, 410, 413),
        },
    )
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        """A new run of the same workflow and input reusing the results before `from_step`."""
        run_id = self.run_id()
        body = validated(ForkSerializer, request.data)
        new_id = pw.fork_run(
            run_id, from_step=body["from_step"], by=request.user, reason=body["reason"]
        )
        location = reverse("pikku_workflows_api:run-detail", args=[new_id], request=request)
        return Response(pw.get_run_status(new_id), headers={"Location": location})

    @documented(
        parameters=[RUN_ID, SIGNAL_NAME],
        request=SignalSerializer,
        responses={
            202: OpenApiResponse(
                RunSummarySerializer,
                description="Delivered to the wait for it, or kept until one is reached; the "
                "run's summary.",
            ),
            **errors(400, 403, 404, 409, 410, 413, described=SIGNAL_ERRORS),
        },
    )
    # Any name `wf.wait_for_signal` may wait for (slashes and line breaks too) reaches the
    # engine, which refuses the ones it would not store as a 400, never a routing 404.
    @action(detail=True, methods=["post"], url_path=r"signals/(?P<name>[\s\S]+)")
    def signals(self, request: Request, pk: str, name: str) -> Response:
        """Send the signal `name` with `payload` to a run you may see and started, or to any
        run you may see with `signal_workflowrun` (else 403 SIGNAL_FORBIDDEN, audited `deny`);
        audited `signal`. An ended run refuses it (409 INVALID_TRANSITION), never silently
        dropped. The engine checks the name as `wf.wait_for_signal` does (text, at most 200
        characters)."""
        run_id = self.run_id()
        body = validated(SignalSerializer, request.data)
        summary = pw.send_signal(run_id, name, body["payload"], by=request.user)
        return Response(summary, status=status.HTTP_202_ACCEPTED)

    @documented(
        parameters=[RUN_ID],
        request=OperationSerializer,
        responses={200: RunSummarySerializer, **errors(400, 403, 404, 410, 413)},
    )
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str) -> Response:
        """Keep the run (and its child runs) from every purge, whatever its age, until it is
        released (needs `hold_workflowrun`); audited `hold`. Holding a held run changes nothing."""
        return self._hold(request, hold=True)

    @documented(
        parameters=[RUN_ID],
        request=OperationSerializer,
        responses={200: RunSummarySerializer, **errors(400, 403, 404, 410, 413)},
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Let purges take the run again once it is old enough (needs `hold_workflowrun`);
        audited `release`."""
        return self._hold(request, hold=False)

    def _hold(self, request: Request, *, hold: bool) -> Response:
        run_id = self.run_id()
        body = validated(OperationSerializer, request.data)
        return Response(pw.hold_run(run_id, hold=hold, reason=body["reason"], by=request.user))

    @documented(
        parameters=[RUN_ID, UPDATE_NAME],
        request=UpdateSerializer,
        responses={
            200: OpenApiResponse(UpdateAnswerSerializer, description="The run's reply."),
            202: OpenApiResponse(
                UpdateAnswerSerializer, description="Accepted (wait=accepted): its update id."
            ),
            **errors(400, 403, 404, 409, 413, 422, 504, described=UPDATE_ERRORS),
        },
    )
    @action(detail=True, methods=["post"], url_path=r"updates/(?P<name>[\s\S]+)")
    def updates(self, request: Request, pk: str, name: str) -> Response:
        """Send the update `name` to a run you may see (or the latest run of its chain), as a
        signal's sender may: the workflow's validator refuses it (422, nothing kept) or it is
        kept, once per `update_id`, until the run's `wf.reply` answers (200 with the result;
        202 at once with `wait=accepted`; 504 when no reply comes in time)."""
        run_id = self.run_id()
        body = validated(UpdateSerializer, request.data)
        update_id = body["update_id"] or uuid.uuid4().hex
        answer = pw.update(
            run_id,
            name,
            body["payload"],
            wait=body["wait"],
            timeout=body["timeout"],
            update_id=update_id,
            by=request.user,
        )
        if body["wait"] == "accepted":
            return Response({"update_id": update_id}, status=status.HTTP_202_ACCEPTED)
        return Response({"update_id": update_id, "result": answer})

    @documented(
        parameters=[
            OpenApiParameter(
                "operation",
                str,
                OpenApiParameter.PATH,
                enum=[*bulk.RULES],
            )
        ],
        request=BulkSerializer,
        responses={200: BulkResultSerializer, **errors(400, 404, 413)},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path=r"bulk/(?P<operation>[^/]+)",
    )
    def bulk(self, request: Request, operation: str) -> Response:
        if operation not in bulk.RULES:
            raise NotFound(f"No bulk operation {operation!r}; there are {', '.join(bulk.RULES)}.")
        body = request.data
        if not isinstance(body, dict):
            raise ValidationError(["Expected a JSON object of filters and options."])
        rule = bulk.RULES[operation]
        option_names = bulk_option_names(rule)
        unknown = sorted(set(body) - set(BULK_FILTERS) - set(option_names))
        if unknown:
            raise ValidationError({name: ["Not a filter of runs."] for name in unknown})
        filters = {name: value for name, value in body.items() if name in BULK_FILTERS}
        if not filters:
            raise ValidationError(
                [
                    "Name at least one filter (e.g. status): a bulk operation "
                    "never selects every run by default."
                ]
            )
        options = validated(
            bulk_options_serializer(rule), {k: body[k] for k in option_names if k in body}
        )
        filterset = RunFilterSet(filters_from_body(filters), self.get_queryset(), request=request)
        if not filterset.is_valid():
            raise filter_utils.translate_validation(filterset.errors)
        plan = bulk.preview(filterset.qs, rule)
        if options["dry_run"]:
            return Response(plan.as_data(dry_run=True))
        flags = {flag.name: options[flag.name] for flag in rule.flags}
        return Response(bulk.perform(plan, by=request.user, reason=options["reason"], **flags))


class LimitViewSet(PikkuAPIMixin, viewsets.ViewSet):
    """Named limits: their rates and live usage, and an operator's edit of a rate."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"  # names have dots ("vendors.openai")

    def required_permission(self) -> str | None:
        if self.action == "partial_update":
            return get_permission_codename("change", WorkflowLimit._meta)
        return None

    @documented(responses={200: LimitSerializer(many=True), **errors()})
    def list(self, request: Request) -> Response:
        return Response(list_limits())

    @documented(responses={200: LimitSerializer, **errors(404)})
    def retrieve(self, request: Request, name: str) -> Response:
        return Response(get_limit(name))

    @documented(request=LimitUpdateSerializer, responses={200: LimitSerializer, **errors(400, 404)})
    def partial_update(self, request: Request, name: str) -> Response:
        """Set the limit's rate and/or burst from the next start on, and/or its max_running
        from now on (code deploys leave them)."""
        body = validated(LimitUpdateSerializer, request.data)
        return Response(update_limit(name, by=request.user, **body))
