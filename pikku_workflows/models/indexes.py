"""Indexes shared by the models."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models


class CoveringIndex(models.Index):
    """`models.Index(include=...)` for a backend-neutral model: the non-key columns are added
    where the database supports covering indexes (PostgreSQL) and left out elsewhere, as
    Django's schema editor does anyway, without the system check warning (models.W040) every
    `migrate` on SQLite. Migrations hold it as the plain Index it creates, so state is the same
    as for `models.Index(include=...)`."""

    def __init__(self, *, include: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Not `include`: the check reads that to warn where covering indexes are unsupported.
        self.covering = tuple(include)

    def as_index(self) -> models.Index:
        _, expressions, kwargs = self.deconstruct()
        return models.Index(*expressions, **kwargs)

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        return self.as_index().create_sql(model, schema_editor, using, **kwargs)

    def deconstruct(self) -> Any:
        _, expressions, kwargs = super().deconstruct()
        return "django.db.models.Index", expressions, {**kwargs, "include": self.covering}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, models.Index):
            return self.deconstruct() == other.deconstruct()
        return NotImplemented
