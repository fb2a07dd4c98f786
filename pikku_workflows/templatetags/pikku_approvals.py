"""`{% pending_approvals %}`: how many approvals wait for the current user, linking to the
inbox (for a host's admin index: `{% load pikku_approvals %}{% pending_approvals %}`)."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.inclusion_tag("admin/pikku_workflows/includes/pending_approvals.html", takes_context=True)
def pending_approvals(context: dict[str, Any]) -> dict[str, Any]:
    from ..admin.run_approvals import pending_approvals_for  # the admin imports models

    request = context.get("request")
    if request is None:
        return {"count": 0}
    return pending_approvals_for(request)
