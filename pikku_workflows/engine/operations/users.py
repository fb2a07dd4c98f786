"""The users an operation acts for (`by=`, `started_by=`), checked before anything is written."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser

from ...exceptions import InvalidInput


def checked_user(user: Any, what: str) -> Any:
    """A saved user, or None; anything else (a username, an AnonymousUser, an unsaved user) is
    InvalidInput: the audit trail and `started_by` must point at a real account."""
    if user is None:
        return None
    if not isinstance(user, AbstractBaseUser) or user.pk is None:
        raise InvalidInput(
            f"{what} must be a saved user (or None), not {type(user).__name__} {user!r:.60}; "
            "pass None for an anonymous request."
        )
    return user
