"""URLs of the demo project: the admin at /admin/, the HTTP API at /api/workflows/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("api/workflows/", include("pikku_workflows.api.urls")),
]
