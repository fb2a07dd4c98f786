from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_migrations__match_models():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
