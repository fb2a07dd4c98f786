"""Checks of an approval node's options: the keyword arguments of `wf.approval`, as JSON.

They are judged by `wf.approval`'s own rules (`approvals.policy.checked_request`), so a graph
that validates never fails on its approval options when a run reaches the node.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from ..approvals.policy import checked_request
from ..exceptions import InvalidInput
from ..status import ApprovalStatus

APPROVAL_OPTIONS = tuple(inspect.signature(checked_request).parameters)
# An approval node branches on its outcome's status; `next` may name each of them.
OUTCOME_BRANCHES = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED)
# JSON cannot carry a Form class: a graph names it by its dotted path. Whether the path
# imports is checked when the node runs (apps may not be loaded while a graph registers).
_DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
# Checked by the caller: `data` may hold `$ref`s and templates like `input`.
_CHECKED_ELSEWHERE = ("form", "data")


def approval_problems(options: Any) -> list[str]:
    """Every problem with `approval` options (a null option takes its default)."""
    if not isinstance(options, dict):
        return [f"approval must be an object of wf.approval options, not {options!r}"]
    unknown = sorted(set(options) - set(APPROVAL_OPTIONS))
    problems = [f"approval has unknown options {unknown}"] if unknown else []
    form = options.get("form")
    if form is not None and not (isinstance(form, str) and _DOTTED_PATH.match(form)):
        problems.append(
            f"approval: form must be the dotted path of a Form class (e.g. 'app.forms.Decision'), "
            f"not {form!r}"
        )
    given = {
        option: value
        for option, value in options.items()
        if option in APPROVAL_OPTIONS and option not in _CHECKED_ELSEWHERE and value is not None
    }
    try:
        checked_request(**given)
    except InvalidInput as exc:
        problems += [
            f"approval: {problem.removeprefix('wf.approval: ')}" for problem in exc.problems
        ]
    return problems


def outcome_branch_problems(next_value: Any) -> list[str]:
    """A problem per branch of an approval node's `next` that no outcome can take."""
    if not isinstance(next_value, dict):
        return []
    return [
        f"next: an approval node branches on its outcome "
        f"({', '.join(OUTCOME_BRANCHES)}), not {branch!r}"
        for branch in next_value
        if branch not in OUTCOME_BRANCHES
    ]
