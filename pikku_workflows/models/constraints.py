"""Check constraints shared by the models."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def choice_check(
    name: str, choices: type[models.TextChoices], field: str = "status"
) -> models.CheckConstraint:
    # Django 5.1 renamed CheckConstraint(check=) to condition=; 5.2 and 6.x both take condition.
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)
