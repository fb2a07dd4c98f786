"""The form a manager fills in when deciding a large order (`wf.approval(form=...)`)."""

from __future__ import annotations

from django import forms


class ManagerDecision(forms.Form):
    discount_percent = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=30,
        initial=0,
        help_text="A goodwill discount on the charge, 0 to 30 %.",
    )
    note = forms.CharField(
        required=False, max_length=200, help_text="A note for the warehouse (optional)."
    )
