"""`manage.py pikku_recover`: one recovery pass (cron-friendly); prints counts by kind."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Fire due timers, re-dispatch lapsed leases, relay lost messages, resume stalled runs."

    def handle(self, *args: Any, **options: Any) -> None:
        from pikku_workflows.engine.operations.recovery import recover

        self.stdout.write(json.dumps(recover()))
