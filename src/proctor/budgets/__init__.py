"""Budgets: limits, prices, the spend ledger, leases, and the accountant."""

from proctor.budgets._bucket import RetryBucket as RetryBucket
from proctor.budgets._bucket import backoff as backoff
from proctor.budgets._budget import DIMENSIONS as DIMENSIONS
from proctor.budgets._budget import Budget as Budget
from proctor.budgets._budget import Exhaustion as Exhaustion
from proctor.budgets._budget import Lease as Lease
from proctor.budgets._budget import LeaseSettlement as LeaseSettlement
from proctor.budgets._budget import Ledger as Ledger
from proctor.budgets._budget import LedgerStatistics as LedgerStatistics
from proctor.budgets._budget import Retune as Retune
from proctor.budgets._prices import BUILTIN_PRICES as BUILTIN_PRICES
from proctor.budgets._prices import Price as Price
from proctor.budgets._prices import PriceTable as PriceTable
from proctor.budgets._usage import Usage as Usage
from proctor.budgets._usage import estimate as estimate

__all__ = (
    "BUILTIN_PRICES",
    "DIMENSIONS",
    "Budget",
    "Exhaustion",
    "Lease",
    "LeaseSettlement",
    "Ledger",
    "LedgerStatistics",
    "Price",
    "PriceTable",
    "RetryBucket",
    "Retune",
    "Usage",
    "backoff",
    "estimate",
)
