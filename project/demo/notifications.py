"""The demo tells managers by e-mail (the console backend prints it) when an order waits for
their approval: a receiver of `pw.approval_requested`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse

import pikku_workflows as pw


def email_deciders(
    sender: Any, approval: Any, deciders: list[Any], reason: str, **kwargs: Any
) -> None:
    recipients = sorted({user.email for user in deciders if user.email})
    if not recipients:
        return
    link = settings.DEMO_SITE_URL + reverse(
        "admin:pikku_workflows_workflowapproval_decide", args=[approval.pk]
    )
    why = {
        "escalated": "Nobody decided in time, so it is yours now.\n\n",
        "reassigned": "It was reassigned to you.\n\n",
    }
    summary = approval.summary or f"Step {approval.step.step_key} waits for a decision"
    send_mail(
        subject=f"Approval needed: {summary}",
        message=f"{summary}.\n\n{why.get(reason, '')}Decide it here: {link}\n",
        from_email=None,
        recipient_list=recipients,
    )


def connect() -> None:
    pw.approval_requested.connect(email_deciders, dispatch_uid="demo.email_deciders")
