"""The approval endpoints (docs/http-api.md): the approvals a user may see (list with filters, detail),
and deciding (approve, reject) and reassigning one, each through the engine's operation, which
judges the approval's policy, validates the form's data and audits.

These views never run inside ATOMIC_REQUESTS' transaction: a refusal (`deny`, an expiry
recorded on the way) is committed by the engine before it raises, and the error handler's
rollback of the request's transaction would undo it.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

import pikku_workflows as pw

from ..exceptions import InvalidDecisionData
from ..models import WorkflowApproval
from .engine_internals import approval_dict, approval_pk
from .filters import ApprovalFilterSet
from .pagination import ApprovalCursorPagination
from .permissions import ApprovalPermission, visible_approvals
from .schema import APPROVAL_ERRORS, APPROVAL_READ_ERRORS, documented, errors
from .serializers import ApprovalSerializer, DecisionSerializer, ReassignSerializer
from .views import PikkuAPIMixin, validated

APPROVAL_ID = OpenApiParameter(
    "id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="An approval id."
)
# What approve, reject and reassign answer: the approval as it now stands, or why not.
ACTION_ANSWERS = {
    200: ApprovalSerializer,
    **errors(400, 403, 404, 409, 413, described=APPROVAL_ERRORS),
}
# The run and step columns an approval's dict reads; their JSON payloads stay in the database.
DEFERRED = (
    "run__input",
    "run__output",
    "run__error",
    "run__state",
    "run__planned_steps",
    "step__data",
    "step__result",
    "step__error",
)


class ApprovalViewSet(PikkuAPIMixin, viewsets.GenericViewSet):
    """Approvals you may see: those you may decide (or did), and those of runs you may read,
    within the host's RUN_QUERYSET_FILTER. One you may not see answers 404 everywhere."""

    permission_classes = (ApprovalPermission,)
    lookup_value_regex = "[^/]+"  # a malformed id is APPROVAL_NOT_FOUND, not a routing 404
    filter_backends = (DjangoFilterBackend,)
    filterset_class = ApprovalFilterSet
    pagination_class = ApprovalCursorPagination
    queryset = WorkflowApproval.objects.none()  # for the schema's path parameters only

    @transaction.non_atomic_requests
    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return super().dispatch(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[WorkflowApproval]:
        return (
            visible_approvals(self.request)
            .select_related("run", "step", "decided_by")
            .defer(*DEFERRED)
            .prefetch_related("decisions")
        )

    def approval_id(self) -> uuid.UUID:
        """The approval of the URL: visible (else 404), then the action's permission (else
        403, nothing recorded)."""
        pk = approval_pk(self.kwargs["pk"])
        if not visible_approvals(self.request).filter(pk=pk).exists():
            raise pw.ApprovalNotFound(pk)
        self.check_object_permissions(self.request, pk)
        return pk

    @documented(responses={200: ApprovalSerializer(many=True), **errors(400)})
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response([approval_dict(approval) for approval in page or []])

    @documented(
        parameters=[APPROVAL_ID],
        responses={200: ApprovalSerializer, **errors(404, described=APPROVAL_READ_ERRORS)},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        approval = self.get_queryset().filter(pk=approval_pk(pk)).first()
        if approval is None:
            raise pw.ApprovalNotFound(pk)
        return Response(approval_dict(approval))

    def _decide(self, request: Request, *, approve: bool) -> Response:
        approval_id = self.approval_id()
        body = validated(DecisionSerializer, request.data)
        try:
            answer = pw.decide_approval(
                approval_id,
                approve=approve,
                by=request.user,
                comment=body["comment"],
                data=body["data"],
            )
        except InvalidDecisionData as exc:
            # The form's own errors, per field, as DRF names a body's: under `data`.
            fields = {
                api_settings.NON_FIELD_ERRORS_KEY if name == "__all__" else name: messages
                for name, messages in exc.field_errors.items()
            }
            raise ValidationError({"data": fields}) from exc
        return Response(answer)

    @documented(
        parameters=[APPROVAL_ID],
        request=DecisionSerializer,
        responses=ACTION_ANSWERS,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve, with a comment and the form's data; the policy says whether it settles."""
        return self._decide(request, approve=True)

    @documented(
        parameters=[APPROVAL_ID],
        request=DecisionSerializer,
        responses=ACTION_ANSWERS,
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject, with a comment and the form's data; the policy says whether it settles."""
        return self._decide(request, approve=False)

    @documented(
        parameters=[APPROVAL_ID],
        request=ReassignSerializer,
        responses=ACTION_ANSWERS,
    )
    @action(detail=True, methods=["post"])
    def reassign(self, request: Request, pk: str) -> Response:
        """Give a pending approval new approvers (audited `reassign`, with your reason)."""
        approval_id = self.approval_id()
        body = validated(ReassignSerializer, request.data)
        answer = pw.reassign_approval(
            approval_id, approvers=body["approvers"], by=request.user, reason=body["reason"]
        )
        return Response(answer)
