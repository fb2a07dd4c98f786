"""`GET metrics/`: the Prometheus text of `observability.exposition`, for a scraper holding
`METRICS_TOKEN` (a bearer token) or a staff user; anyone else 401 (no credentials, a wrong
token) or 403 (signed in, not staff)."""

from __future__ import annotations

import hmac
from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from ..conf import pikku_settings
from ..observability.exposition import CONTENT_TYPE, metrics_text
from .schema import documented, errors
from .views import PikkuAPIMixin

# What `request.auth` holds when the scraper's bearer token is METRICS_TOKEN.
METRICS_TOKEN_GRANT = "metrics-token"


class MetricsTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <METRICS_TOKEN>`. Any other bearer token is left to the host's
    own authentication classes (a JWT, say); none accepting it answers 401."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        words = get_authorization_header(request).split()
        token = pikku_settings.METRICS_TOKEN
        if len(words) != 2 or words[0].lower() != b"bearer" or not token:
            return None
        if hmac.compare_digest(words[1], token.encode()):
            return AnonymousUser(), METRICS_TOKEN_GRANT
        return None

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="metrics"'


class MetricsTokenScheme(OpenApiAuthenticationExtension):
    """How the schema names the metrics token."""

    target_class = MetricsTokenAuthentication
    name = "metricsToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "METRICS_TOKEN"}


class MetricsPermission(BasePermission):
    """The metrics token, or a staff user."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return request.auth == METRICS_TOKEN_GRANT or bool(user and user.is_staff)


class PrometheusTextRenderer(BaseRenderer):
    """The exposition as it comes."""

    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> bytes:
        return bytes(data)


class MetricsView(PikkuAPIMixin, APIView):
    """Prometheus metrics read from the tables (docs/observability.md)."""

    permission_classes = (MetricsPermission,)
    renderer_classes = (PrometheusTextRenderer,)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # Errors answer `{"code", "detail"}` as JSON like the rest of the API, whatever the
        # scraper accepts.
        if response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    def get_authenticators(self) -> list[BaseAuthentication]:
        host_classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
        return [MetricsTokenAuthentication(), *(cls() for cls in host_classes)]

    @documented(
        operation_id="metrics",
        responses={
            (200, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR, description="Prometheus text exposition format 0.0.4."
            ),
            **errors(),
        },
    )
    def get(self, request: Request) -> Response:
        return Response(metrics_text(), content_type=CONTENT_TYPE)
