"""The API's JSON parser: refuses, as a 400 `INVALID_INPUT`, every body that is not JSON the
database can store, so bad input never reaches a query as a server error; and a body over the
API's own limit (`MAX_PAYLOAD_BYTES`, what the engine accepts) as a 413 `PAYLOAD_TOO_LARGE`,
before reading it past that limit (docs/security-and-limits.md)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from ..conf import pikku_settings
from .errors import PayloadTooLarge

# Deeper bodies are refused before anything recurses over them (Python's own recursion limit
# sits near 1,000 frames, and a request handler already uses some).
MAX_DEPTH = 256
# A lone UTF-16 surrogate (`"\ud800"` is valid JSON) cannot be encoded as UTF-8 for the database.
_SURROGATE = re.compile("[\ud800-\udfff]")


class StrictJSONParser(BaseParser):
    """JSON bodies, stricter than DRF's parser: bodies over `MAX_PAYLOAD_BYTES`, non-finite
    numbers (`NaN`, `1e999`), lone surrogates and nesting deeper than MAX_DEPTH are refused.

    Not a `JSONParser` subclass: DRF reads such a parser's body through `request.body`, which
    applies Django's DATA_UPLOAD_MAX_MEMORY_SIZE; this one reads the stream to its own limit.
    """

    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = _read_within_limit(stream, parser_context or {})
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = raw.decode(encoding)
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except (ValueError, LookupError) as exc:  # UnicodeDecodeError and JSONDecodeError too
            raise ParseError(f"JSON parse error - {exc}") from exc
        except RecursionError as exc:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels") from exc
        _check_storable(data)
        return data


def _read_within_limit(stream: Any, parser_context: dict[str, Any]) -> bytes:
    """The body, refused unread when its declared length is over the limit, and refused once
    more than the limit has arrived (a chunked body declares none)."""
    limit = pikku_settings.MAX_PAYLOAD_BYTES
    request = parser_context.get("request")
    declared = request.META.get("CONTENT_LENGTH") if request is not None else None
    if declared and str(declared).isdigit() and int(declared) > limit:
        raise PayloadTooLarge(limit, "MAX_PAYLOAD_BYTES")
    raw: bytes = stream.read(limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(limit, "MAX_PAYLOAD_BYTES")
    return raw


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range for a JSON number")
    return number


def _check_storable(data: Any) -> None:
    """Walk the parsed value without recursion: depth and strings the database cannot hold."""
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key)
                pending.append((item, depth + 1))
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    if _SURROGATE.search(text):
        raise ParseError("JSON parse error - a string holds a lone UTF-16 surrogate")
