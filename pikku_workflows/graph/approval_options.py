"""Checks of an approval node's options: the keyword arguments of `wf.approval`, as JSON."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..durations import parse_duration
from ..exceptions import InvalidInput

POLICIES = ("any", "all", "quorum")
ON_EXPIRE = ("reject", "approve", "fail", "escalate")
# JSON cannot carry a Form class: a graph names it by its dotted path.
_DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def approval_problems(options: Any) -> list[str]:
    """Every problem with `approval` options; `data` is checked by the caller (it may hold
    `$ref`s and templates like `input`)."""
    if not isinstance(options, dict):
        return [f"approval must be an object of wf.approval options, not {options!r}"]
    unknown = sorted(set(options) - set(_CHECKS))
    problems = [f"approval has unknown options {unknown}"] if unknown else []
    for option, check in _CHECKS.items():
        if option in options and options[option] is not None:
            problem = check(options[option])
            if problem:
                problems.append(f"approval.{option}: {problem}")
    return problems + _combination_problems(options)


def _combination_problems(options: dict[str, Any]) -> list[str]:
    problems = []
    quorum_policy = options.get("policy") == "quorum"
    if quorum_policy and options.get("quorum") is None:
        problems.append("approval: policy 'quorum' needs quorum (how many approvals)")
    if not quorum_policy and options.get("quorum") is not None:
        problems.append("approval: quorum is only meaningful with policy 'quorum'")
    if options.get("on_expire") == "escalate" and not options.get("escalate_to"):
        problems.append("approval: on_expire 'escalate' needs escalate_to")
    return problems


def _names(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        return f"a list of usernames, 'group:<name>' or 'perm:<app.codename>', not {value!r}"
    return None


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"one of {list(choices)}, not {value!r}"

    return check


def _positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"a positive int, not {value!r}"
    return None


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"true or false, not {value!r}"


def _duration(value: Any) -> str | None:
    try:
        parse_duration(value)
    except InvalidInput as exc:
        return exc.message
    return None


def _dotted_path(value: Any) -> str | None:
    if isinstance(value, str) and _DOTTED_PATH.match(value):
        return None
    return f"the dotted path of a Form class (e.g. 'app.forms.Decision'), not {value!r}"


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else f"a string, not {value!r}"


def _any_json(value: Any) -> str | None:
    return None


_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "approvers": _names,
    "policy": _one_of(POLICIES),
    "quorum": _positive_int,
    "exclude_requester": _boolean,
    "expires_in": _duration,
    "on_expire": _one_of(ON_EXPIRE),
    "escalate_to": _names,
    "remind_every": _duration,
    "form": _dotted_path,
    "summary": _text,
    "data": _any_json,
}
