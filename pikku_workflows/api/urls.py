"""URLs of the API: `path("api/workflows/", include("pikku_workflows.api.urls"))`."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from .approvals import ApprovalViewSet
from .metrics import MetricsView
from .schedules import ScheduleViewSet
from .schema import RedocView, SchemaView, SwaggerView
from .views import DefinitionViewSet, LimitViewSet, RunViewSet

app_name = "pikku_workflows_api"

router = SimpleRouter()
router.register("definitions", DefinitionViewSet, basename="definition")
router.register("runs", RunViewSet, basename="run")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("limits", LimitViewSet, basename="limit")
router.register("schedules", ScheduleViewSet, basename="schedule")

urlpatterns = [
    *router.urls,
    path("metrics/", MetricsView.as_view(), name="metrics"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("schema/swagger/", SwaggerView.as_view(), name="swagger"),
    path("schema/redoc/", RedocView.as_view(), name="redoc"),
]
