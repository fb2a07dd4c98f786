"""The data a decider fills in: an approval's `form` (a Django Form class, kept by its dotted
path) and the check of a decision's data against it, shared by the admin, the engine and the
HTTP API so all three accept and refuse the same data (no queries of its own)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.module_loading import import_string

from ..exceptions import InvalidDecisionData, InvalidInput
from ..serialization import NotStorableJson, round_trip
from ..validation import KEY_MAX_LENGTH


def form_path(form: Any) -> str:
    """The dotted path an approval keeps of `form` (a Form class, its dotted path, or None: "");
    InvalidInput unless the path imports back to that Form class."""
    if form is None or form == "":
        return ""
    if isinstance(form, str):
        load_form(form)
        return form
    if isinstance(form, type) and issubclass(form, forms.BaseForm):
        path = f"{form.__module__}.{form.__qualname__}"
        try:
            imported = import_string(path)
        except ImportError:
            imported = None
        if imported is not form:
            raise InvalidInput(
                f"wf.approval: form {form.__qualname__} must be importable as {path!r} "
                "(define it at the top level of a module)."
            )
        return _checked_length(path)
    raise InvalidInput(
        f"wf.approval: form must be a Django Form class or its dotted path, not {form!r}."
    )


def load_form(path: str) -> type[forms.BaseForm]:
    """The Form class at `path`; InvalidInput when there is none."""
    _checked_length(path)
    try:
        form = import_string(path)
    except ImportError as exc:
        raise InvalidInput(f"The approval form {path!r} cannot be imported: {exc}") from exc
    if not (isinstance(form, type) and issubclass(form, forms.BaseForm)):
        raise InvalidInput(f"The approval form {path!r} is not a Django Form class.")
    return form


def _checked_length(path: str) -> str:
    if len(path) > KEY_MAX_LENGTH:
        raise InvalidInput(f"The form's dotted path is longer than {KEY_MAX_LENGTH} characters.")
    return path


def decision_data(form: str, data: Any) -> dict[str, Any]:
    """The data a decision records: with a form, its cleaned data (as JSON: dates as ISO text,
    decimals as text, model instances as their pk), raising InvalidDecisionData with the field
    errors; without one, any JSON object (None: {})."""
    if not form:
        return _plain_data(data)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidInput(f"The decision's data must be an object of form fields, not {data!r}.")
    bound = load_form(form)(data=data)
    if not bound.is_valid():
        errors = {
            name: [str(message) for message in messages] for name, messages in bound.errors.items()
        }
        raise InvalidDecisionData(form, errors)
    try:
        return round_trip(json.loads(json.dumps(bound.cleaned_data, cls=_FormDataEncoder)))
    except (TypeError, ValueError, NotStorableJson) as exc:
        raise InvalidInput(
            f"The form {form!r} cleaned its data into something not JSON: {exc}"
        ) from exc


def _plain_data(data: Any) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInput(f"The decision's data must be a JSON object, not {data!r:.80}.")
    try:
        return round_trip(data)
    except NotStorableJson as exc:
        raise InvalidInput(f"The decision's data is not storable JSON: {exc}") from exc


class _FormDataEncoder(DjangoJSONEncoder):
    """Cleaned form values as JSON: what DjangoJSONEncoder knows, and model choices as pks."""

    def default(self, o: Any) -> Any:
        if hasattr(o, "_meta") and hasattr(o, "pk"):
            return o.pk
        if hasattr(o, "model") and hasattr(o, "values_list"):
            return list(o.values_list("pk", flat=True))
        if isinstance(o, set | frozenset):
            return sorted(o, key=str)
        return super().default(o)
