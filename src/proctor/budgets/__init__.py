"""Budgets: limits, the spend ledger, and the accountant."""

from proctor.budgets._budget import DIMENSIONS as DIMENSIONS
from proctor.budgets._budget import Budget as Budget
from proctor.budgets._budget import Exhaustion as Exhaustion
from proctor.budgets._budget import Ledger as Ledger

__all__ = ("DIMENSIONS", "Budget", "Exhaustion", "Ledger")
