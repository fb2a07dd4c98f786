"""The HTTP API (docs/http-api.md): DRF views over the engine's public operations, for frontends.

Mount it with `path("api/workflows/", include("pikku_workflows.api.urls"))`; that page lists the
endpoints, permissions and the settings it needs.
"""
