"""The demo project's own checks: never serve with the development SECRET_KEY."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register


@register(deploy=False)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from project.settings import DEVELOPMENT_SECRET_KEY

    if settings.DEBUG or settings.SECRET_KEY != DEVELOPMENT_SECRET_KEY:
        return []
    return [
        Error(
            "DEBUG is off but SECRET_KEY is the development fallback.",
            hint="Set DJANGO_SECRET_KEY in the environment.",
            id="demo.E001",
        )
    ]
