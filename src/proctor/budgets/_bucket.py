"""
Retry pacing: a token bucket and capped exponential backoff with full jitter.

The bucket bounds how fast retries may happen; the ledger's ``retries``
dimension bounds how many may happen at all (the controller reserves one retry
before each). Neither one alone stops a storm of retries from spending a task's
budget.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

import anyio
import attrs

from proctor._errors import ConfigError

__all__ = ("RetryBucket", "backoff")

# 2.0 ** 1024 overflows a float; any attempt beyond this is capped anyway.
_MAX_EXPONENT = 1000


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{attribute.name}: must be a number >= 0, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{attribute.name}: must be finite, got {value!r}")


@attrs.define(eq=False)
class RetryBucket:
    """
    A token bucket: ``capacity`` tokens, refilled at ``refill_per_second``.

    It starts full. Each retry takes a token; when none is left, the retry waits
    (:meth:`wait_time`) or is given up.

    Args:
        capacity: the most tokens the bucket holds (the largest burst).
        refill_per_second: tokens added per second, up to ``capacity``.
        clock: a monotonic clock in seconds.
    """

    capacity: float = attrs.field(validator=_positive)
    refill_per_second: float = attrs.field(validator=_positive)
    clock: Callable[[], float] = time.monotonic
    _tokens: float = attrs.field(init=False)
    _stamp: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._tokens = float(self.capacity)
        self._stamp = self.clock()

    def _refill(self) -> None:
        now = self.clock()
        # A clock that goes backwards adds nothing.
        passed = max(0.0, now - self._stamp)
        self._stamp = now
        self._tokens = min(float(self.capacity), self._tokens + passed * self.refill_per_second)

    @property
    def tokens(self) -> float:
        """The tokens in the bucket now."""
        self._refill()
        return self._tokens

    def try_take(self, n: float = 1) -> bool:
        """Take ``n`` tokens if the bucket holds them; return whether it did."""
        self._refill()
        if self._tokens + 1e-9 >= n:
            self._tokens = max(0.0, self._tokens - n)
            return True
        return False

    def wait_time(self, n: float = 1) -> float:
        """
        Return the seconds until ``n`` tokens are in the bucket (0 if they are now).

        ``inf`` when they never will be: ``n`` is more than the capacity, or the
        bucket does not refill.
        """
        self._refill()
        missing = n - self._tokens
        if missing <= 1e-9:
            return 0.0
        if n > self.capacity or self.refill_per_second <= 0:
            return math.inf
        return missing / self.refill_per_second

    async def take(self, n: float = 1) -> None:
        """
        Wait until ``n`` tokens are in the bucket, then take them.

        Waiting uses anyio's clock; the caller bounds it with ``anyio.fail_after``.

        Raises:
            ConfigError: ``n`` tokens never fit (more than the capacity, or no refill).
        """
        while not self.try_take(n):
            wait = self.wait_time(n)
            if wait == math.inf:
                raise ConfigError(
                    f"{n:g} retry tokens never fit a bucket of capacity {self.capacity:g} "
                    f"refilled at {self.refill_per_second:g}/s"
                )
            await anyio.sleep(wait)


def backoff(
    attempt: int,
    base: float = 0.5,
    cap: float = 30.0,
    rng: Callable[[], float] = random.random,
) -> float:
    """
    Return how long to wait before retry ``attempt`` (0 for the first).

    Capped exponential backoff with full jitter: a uniform draw in
    ``[0, min(cap, base * 2**attempt)]``, so that clients retrying together
    spread out instead of retrying in lockstep.

    Args:
        attempt: how many retries came before this one (>= 0).
        base: the first window in seconds.
        cap: the largest window in seconds.
        rng: a uniform draw in ``[0, 1)``.

    Raises:
        ConfigError: a negative attempt, base or cap.
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ConfigError(f"attempt: must be an integer >= 0, got {attempt!r}")
    for name, value in (("base", base), ("cap", cap)):
        if not value >= 0 or not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number >= 0, got {value!r}")
    window = min(cap, base * 2.0 ** min(attempt, _MAX_EXPONENT))
    return rng() * window
