from __future__ import annotations

import math
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._errors import ConfigError
from proctor.budgets import _bucket
from proctor.budgets._bucket import RetryBucket, backoff


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_bucket.__all__, tuple)
    for name in _bucket.__all__:
        assert getattr(_bucket, name).__doc__, name


@attrs.define
class FakeClock:
    """A monotonic clock the test moves by hand."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


# -- RetryBucket ---------------------------------------------------------------------------


def test_a_bucket_starts_full_and_empties() -> None:
    bucket = RetryBucket(3, 1.0, clock=FakeClock())
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    assert bucket.tokens == 0


def test_a_bucket_refills_with_time() -> None:
    clock = FakeClock()
    bucket = RetryBucket(2, 0.5, clock=clock)
    assert bucket.try_take(2)
    assert not bucket.try_take()
    clock.now = 1.0
    assert not bucket.try_take()  # half a token
    clock.now = 2.0
    assert bucket.try_take()
    assert not bucket.try_take()


def test_a_bucket_never_holds_more_than_its_capacity() -> None:
    clock = FakeClock()
    bucket = RetryBucket(2, 10.0, clock=clock)
    clock.now = 100.0
    assert bucket.tokens == 2
    assert bucket.try_take(2)
    assert not bucket.try_take()


def test_a_clock_going_backwards_adds_nothing() -> None:
    clock = FakeClock(10.0)
    bucket = RetryBucket(1, 1.0, clock=clock)
    assert bucket.try_take()
    clock.now = 5.0
    assert not bucket.try_take()


def test_wait_time_says_when_the_tokens_are_there() -> None:
    clock = FakeClock()
    bucket = RetryBucket(2, 0.5, clock=clock)
    assert bucket.wait_time() == 0.0
    assert bucket.try_take(2)
    assert bucket.wait_time() == pytest.approx(2.0)
    assert bucket.wait_time(2) == pytest.approx(4.0)
    clock.now = 1.5
    assert bucket.wait_time() == pytest.approx(0.5)
    # Asking does not take.
    assert bucket.tokens == pytest.approx(0.75)


def test_wait_time_is_infinite_when_the_tokens_never_fit() -> None:
    assert RetryBucket(2, 1.0, clock=FakeClock()).wait_time(3) == math.inf
    empty = RetryBucket(1, 0.0, clock=FakeClock())
    assert empty.try_take()
    assert empty.wait_time() == math.inf


@pytest.mark.parametrize(
    ("capacity", "refill"), [(-1, 1.0), (1, -1.0), ("1", 1.0), (True, 1.0), (math.inf, 1.0)]
)
def test_a_bad_bucket_is_refused(capacity: Any, refill: Any) -> None:
    with pytest.raises(ConfigError):
        RetryBucket(capacity, refill)


async def test_take_waits_for_a_token() -> None:
    bucket = RetryBucket(1, 1000.0)
    with anyio.fail_after(2):
        await bucket.take()
        await bucket.take()


async def test_take_refuses_what_never_fits() -> None:
    bucket = RetryBucket(1, 1.0)
    with pytest.raises(ConfigError, match="never fit"):
        await bucket.take(2)


@given(
    ops=st.lists(
        st.tuples(st.floats(0, 10), st.floats(0.1, 3)),
        max_size=30,
    ),
    capacity=st.floats(1, 10),
    refill=st.floats(0, 5),
)
def test_a_bucket_never_gives_more_than_capacity_plus_refill(
    ops: list[tuple[float, float]], capacity: float, refill: float
) -> None:
    clock = FakeClock()
    bucket = RetryBucket(capacity, refill, clock=clock)
    taken = 0.0
    for step, n in ops:
        clock.now += step
        if bucket.try_take(n):
            taken += n
    assert taken <= capacity + refill * clock.now + 1e-6
    assert 0 <= bucket.tokens <= capacity


# -- backoff -------------------------------------------------------------------------------------


@given(
    attempt=st.integers(0, 2000),
    base=st.floats(0, 100),
    cap=st.floats(0, 1000),
    draw=st.floats(0, 1, exclude_max=True),
)
def test_backoff_is_within_its_window(attempt: int, base: float, cap: float, draw: float) -> None:
    wait = backoff(attempt, base, cap, rng=lambda: draw)
    assert 0 <= wait <= min(cap, base * 2.0 ** min(attempt, 1000))


def test_backoff_grows_exponentially_until_the_cap() -> None:
    top = [backoff(n, 0.5, 30.0, rng=lambda: 1.0) for n in range(10)]
    assert top == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_backoff_jitters_over_the_whole_window() -> None:
    assert backoff(3, 0.5, 30.0, rng=lambda: 0.0) == 0.0
    assert backoff(3, 0.5, 30.0, rng=lambda: 0.25) == 1.0


def test_backoff_uses_random_by_default() -> None:
    assert 0 <= backoff(2) <= 2.0


@pytest.mark.parametrize(
    ("args", "field"),
    [((-1,), "attempt"), ((1.5,), "attempt"), ((1, -0.5), "base"), ((1, 0.5, math.nan), "cap")],
)
def test_backoff_refuses_bad_arguments(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}:"):
        backoff(*args)
