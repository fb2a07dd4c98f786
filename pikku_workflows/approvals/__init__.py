"""Approvals, the pure core: the policy rules (who may decide, quorum, expiry, escalation), the
decision forms, and the Django signals sent when an approval changes. Nothing here touches the
database; the engine's approval modules apply them to the rows."""
