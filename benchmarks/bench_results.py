"""
What a pytest check's signed per-test results cost, against pytest alone and
against the JUnit report they replaced.

Usage::

    python benchmarks/bench_results.py            # 2,000 and 10,000 tests, 5 rounds
    python benchmarks/bench_results.py --quick    # 500 tests, 2 rounds

Each round runs the same suite three ways, interleaved: ``pytest`` alone,
``pytest --junitxml`` (how per-test results were taken before), and pytest with
proctor's results plugin (a :class:`ResultsChannel`, read back and verified).
Printed: the median wall time of each way, and what the plugin adds per test
over pytest alone and over the JUnit report.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proctor.verifiers._results import ResultsChannel

SUITE = """
import pytest


@pytest.mark.parametrize("i", range({n}))
def test_param(i):
    assert i >= 0


class TestGroup:
    @pytest.mark.parametrize("i", range({n_class}))
    def test_in_class(self, i):
        assert i >= 0
"""


def _pytest(ws: Path, env: dict[str, str], *extra: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pytest failed: {done.stderr.decode()[-2000:]}")
    return time.perf_counter() - started


def _round(ws: Path, tests: int) -> dict[str, float]:
    times: dict[str, float] = {}
    times["pytest"] = _pytest(ws, dict(os.environ))
    report = ws.parent / "report.xml"
    times["junit"] = _pytest(
        ws, dict(os.environ), f"--junitxml={report}", "-o", "junit_family=xunit1"
    )
    channel = ResultsChannel.open()
    try:
        started = time.perf_counter()
        _pytest(ws, {**os.environ, **channel.env(os.environ)})
        outcomes = channel.read()
        times["plugin"] = time.perf_counter() - started
    finally:
        channel.close()
    if len(outcomes) != tests or set(outcomes.values()) != {"passed"}:
        raise SystemExit(f"the plugin reported {len(outcomes)} tests, not {tests}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="500 tests, 2 rounds")
    args = parser.parse_args()
    sizes, rounds = ((500,), 2) if args.quick else ((2000, 10000), 5)
    head = ("tests", "pytest s", "junit s", "plugin s", "+us/test vs pytest", "+us/test vs junit")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (6, 9, 8, 9, 19, 18), strict=True)))
    for tests in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp) / "ws"
            ws.mkdir()
            (ws / "test_suite.py").write_text(
                SUITE.format(n=tests // 2, n_class=tests - tests // 2)
            )
            samples = [_round(ws, tests) for _ in range(rounds)]
        med = {k: statistics.median(s[k] for s in samples) for k in ("pytest", "junit", "plugin")}
        over_pytest = (med["plugin"] - med["pytest"]) / tests * 1e6
        over_junit = (med["plugin"] - med["junit"]) / tests * 1e6
        print(
            f"{tests:>6} {med['pytest']:>9.2f} {med['junit']:>8.2f} {med['plugin']:>9.2f}"
            f" {over_pytest:>19.0f} {over_junit:>18.0f}"
        )


if __name__ == "__main__":
    main()
