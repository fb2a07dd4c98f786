"""A decision's data against the approval's form, without a database: the same check the admin,
the engine and the API make. Valid data comes back as JSON; invalid data lists its field errors."""

from __future__ import annotations

import datetime
import decimal

import pytest
from django import forms
from django.http import QueryDict

from pikku_workflows.approvals.forms import decision_data, form_path, load_form
from pikku_workflows.exceptions import InvalidDecisionData, InvalidInput

PATH = "tests.unit.test_approval_forms__data.RefundDecision"


class RefundDecision(forms.Form):
    amount = forms.DecimalField(max_digits=8, decimal_places=2, min_value=0)
    ship_on = forms.DateField(required=False)
    reason = forms.ChoiceField(choices=[("goodwill", "Goodwill"), ("damage", "Damage")])
    notify = forms.BooleanField(required=False)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("reason") == "goodwill" and (cleaned.get("amount") or 0) > 50:
            raise forms.ValidationError("Goodwill refunds stop at 50.")
        return cleaned


def test_form_path__a_class_is_kept_as_its_dotted_path():
    assert form_path(RefundDecision) == PATH
    assert form_path(PATH) == PATH
    assert form_path(None) == ""
    assert load_form(PATH) is RefundDecision


def test_form_path__refuses_what_is_not_an_importable_form():
    class Local(forms.Form):
        pass

    with pytest.raises(InvalidInput, match="importable"):
        form_path(Local)
    with pytest.raises(InvalidInput, match="cannot be imported"):
        form_path("tests.unit.nowhere.Form")
    with pytest.raises(InvalidInput, match="not a Django Form"):
        form_path("datetime.date")
    with pytest.raises(InvalidInput, match="Form class"):
        form_path(42)


def test_decision_data__valid_data_comes_back_cleaned_as_json():
    data = decision_data(PATH, {"amount": "12.50", "ship_on": "2026-03-01", "reason": "damage"})

    assert data == {"amount": "12.50", "ship_on": "2026-03-01", "reason": "damage", "notify": False}


def test_decision_data__a_query_dict_is_read_like_a_posted_form():
    posted = QueryDict("amount=3&reason=goodwill&notify=on")
    assert decision_data(PATH, posted)["notify"] is True


def test_decision_data__invalid_data_lists_every_field_error():
    with pytest.raises(InvalidDecisionData) as caught:
        decision_data(PATH, {"amount": "-1", "ship_on": "someday"})

    errors = caught.value.field_errors
    assert set(errors) == {"amount", "ship_on", "reason"}
    assert caught.value.code == "INVALID_INPUT"
    assert isinstance(caught.value, InvalidInput)
    assert any(problem.startswith("reason: ") for problem in caught.value.problems)


def test_decision_data__a_form_wide_error_is_listed_under_all():
    with pytest.raises(InvalidDecisionData) as caught:
        decision_data(PATH, {"amount": "80", "reason": "goodwill"})
    assert caught.value.field_errors == {"__all__": ["Goodwill refunds stop at 50."]}


def test_decision_data__without_a_form_any_json_object():
    assert decision_data("", None) == {}
    assert decision_data("", {"any": [1, "thing"]}) == {"any": [1, "thing"]}
    with pytest.raises(InvalidInput, match="JSON object"):
        decision_data("", ["not", "an", "object"])
    with pytest.raises(InvalidInput, match="storable JSON"):
        decision_data("", {"bad": float("inf")})
    with pytest.raises(InvalidInput, match="object of form fields"):
        decision_data(PATH, "amount=3")


def test_decision_data__cleaned_values_json_knows_not_are_converted():
    class Everything(forms.Form):
        when = forms.DateTimeField()
        price = forms.DecimalField()

    globals()["Everything"] = Everything  # importable for this test only
    Everything.__qualname__ = "Everything"
    try:
        data = decision_data(
            "tests.unit.test_approval_forms__data.Everything",
            {"when": "2026-03-01 10:00", "price": "1.10"},
        )
    finally:
        del globals()["Everything"]
    assert data["price"] == "1.10"
    assert data["when"].startswith("2026-03-01T10:00")
    assert isinstance(decimal.Decimal(data["price"]), decimal.Decimal)
    assert datetime.datetime.fromisoformat(data["when"])
