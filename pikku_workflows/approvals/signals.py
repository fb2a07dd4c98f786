"""Django signals about approvals, for hosts that tell people (e-mail, chat). Each is sent
after the commit that recorded what it announces, with `sender=WorkflowApproval`, the
`approval` (a `WorkflowApproval`) and `deciders` (the users who may still decide it, a list);
a receiver's error is logged and never undoes or fails the engine's work.

- `approval_requested`: a run asks for a decision; `reason` is "requested", "escalated"
  (its deadline passed and `escalate_to` decides now) or "reassigned".
- `approval_decided`: decisions settled it; `outcome` (the step's result) and `decision`.
- `approval_reminder`: still pending after `remind_every`.
- `approval_expired`: nobody decided before the deadline; `outcome`.
"""

from __future__ import annotations

from django.dispatch import Signal

approval_requested = Signal()
approval_decided = Signal()
approval_reminder = Signal()
approval_expired = Signal()
