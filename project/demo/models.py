"""The demo shop's orders; each order's fulfilment is a workflow run about it."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    customer = models.CharField(max_length=200)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Order #{self.pk} for {self.customer}"
