"""
Run proctor's benchmarks, side by side with LangGraph, and report them in one table.

Usage::

    python benchmarks/run.py                  # everything, 6 to 9 minutes on 2 cores
    python benchmarks/run.py --quick          # a smoke run, well under a minute
    python benchmarks/run.py --only loop      # one benchmark (repeat --only for more)
    python benchmarks/run.py --only resume --profile   # where the time goes
    python benchmarks/run.py --show benchmarks/results/results.json --markdown

Every benchmark runs several times (5 repetitions in a full run, 3 in a quick
one). The table gives each figure's median, its spread (min-max over the
repetitions for rates and totals, p10-p90 over all samples for the latency of
one operation), its unit, its goal and whether the goal is met. The results,
with the machine, the versions and the date, go to
``benchmarks/results/results.json`` (``results-quick.json`` for a quick run,
``results-NAME.json`` for a part of them).

The benchmarks (``--only NAME``):

- ``loop``: the durable loop, proctor against LangGraph (``bench_loop``,
  ``bench_langgraph``);
- ``dispatch``: the durable record of one effect (``bench_dispatch``);
- ``progress``: the progress check at 100 and 100,000 steps of history
  (``bench_progress``);
- ``workset``: the distinct-work fingerprint (``bench_workset``);
- ``ledger``: the effect ledger at long effect histories (``bench_ledger``);
- ``budget``: one budget reservation round trip (``bench_budget``);
- ``concurrency``: 1,000 concurrent runs in one process (``bench_concurrency``);
- ``resume``: resume of a run with 100,000 steps of history (``bench_resume``);
- ``sandbox``: ``run_command true`` in the sandbox (made ahead, as a run's
  commands are, and made for the command) against the same call on the host, a
  plain spawn and bare bubblewrap, and a sandboxed pytest check against the
  same check on the host (``bench_sandbox``);
- ``journal``: effectful steps at long effect histories, a command step against
  a bare spawn and a durable commit, journal bytes per step, the loop against a
  bare transaction (``bench_journal``);
- ``postgres``: the loop and the effect record on PostgreSQL, when
  ``PROCTOR_BENCH_PG_URL`` names a server.

``--profile`` runs one repetition of ``loop``, ``dispatch``, ``concurrency`` or
``resume`` under cProfile instead, then under pyinstrument's async mode when it
is installed, and writes the reports to ``benchmarks/results/profile-NAME.txt``
and ``profile-NAME-async.txt``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.metadata
import io
import json
import os
import platform
import pstats
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

# Run as a script, this file's directory is on the path, not the repository's.
_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

__all__ = ("BENCHMARKS", "Figure", "Params", "main", "measure")

RESULTS = _ROOT / "benchmarks" / "results"
PG_URL_ENV = "PROCTOR_BENCH_PG_URL"

Spread = Literal["min-max", "p10-p90"]
Goal = tuple[Literal[">=", "<=", "<"], float]
_SYMBOLS = {">=": "≥", "<=": "≤", "<": "<"}


@attrs.frozen
class Params:
    """
    How much each benchmark does.

    Args:
        quick: a smoke run: smaller sizes, fewer repetitions.
        reps: repetitions of each benchmark.
        loop_steps: tool steps of one durable loop.
        tree_files: files in the workspace of the loop in a source tree.
        effects: effects recorded per repetition of ``dispatch``.
        progress_sizes: the short and the long history of ``progress``.
        progress_steps: steps timed at each size, per repetition.
        workset_size: the history of ``workset``.
        runs: concurrent runs of ``concurrency``.
        run_steps: steps each of them takes.
        resume_steps: the history of ``resume``.
    """

    quick: bool
    reps: int
    loop_steps: int
    tree_files: int
    effects: int
    progress_sizes: tuple[int, int]
    progress_steps: int
    workset_size: int
    runs: int
    run_steps: int
    resume_steps: int

    @classmethod
    def full(cls) -> Params:
        """The sizes the goals are stated for."""
        return cls(False, 5, 1_000, 5_000, 200, (100, 100_000), 2_000, 100_000, 1_000, 5, 100_000)

    @classmethod
    def smoke(cls) -> Params:
        """Small sizes for a smoke run: the figures are not comparable with the goals."""
        return cls(True, 3, 100, 1_000, 50, (100, 10_000), 500, 10_000, 100, 5, 2_000)


@attrs.frozen
class Figure:
    """
    One figure of the table.

    Args:
        key: its identity (``loop.ratio``).
        title: what it is, for a person.
        unit: the unit of its values.
        values: the repetitions' values, or all the samples of a latency.
        spread: how its spread is computed.
        goal: its goal, if it has one: a comparison of the median with a bound.
        note: what a reader should know (sizes, settings).
        skipped: why it was not measured, if it was not.
    """

    key: str
    title: str
    unit: str
    values: tuple[float, ...] = ()
    spread: Spread = "min-max"
    goal: Goal | None = None
    note: str = ""
    skipped: str | None = None

    @property
    def median(self) -> float | None:
        """The median of the values."""
        return statistics.median(self.values) if self.values else None

    @property
    def spread_kind(self) -> Spread:
        """The spread as computed: percentiles need 10 values or more."""
        return self.spread if len(self.values) >= 10 else "min-max"

    @property
    def low_high(self) -> tuple[float, float] | None:
        """The spread: min and max, or the 10th and 90th percentiles."""
        if not self.values:
            return None
        if self.spread_kind == "min-max":
            return min(self.values), max(self.values)
        deciles = statistics.quantiles(self.values, n=10, method="inclusive")
        return deciles[0], deciles[-1]

    @property
    def met(self) -> bool | None:
        """Whether the median meets the goal; None without a goal or a value."""
        median = self.median
        if self.goal is None or median is None:
            return None
        op, bound = self.goal
        return {">=": median >= bound, "<=": median <= bound, "<": median < bound}[op]

    def goal_text(self) -> str:
        """The goal as a person reads it."""
        if self.goal is None:
            return ""
        op, bound = self.goal
        return f"{_SYMBOLS[op]} {_number(bound)}"

    def to_json(self) -> dict[str, Any]:
        """The figure as plain data, with its statistics."""
        spread = self.low_high
        return {
            "key": self.key,
            "title": self.title,
            "unit": self.unit,
            "median": self.median,
            "low": spread[0] if spread else None,
            "high": spread[1] if spread else None,
            "spread": self.spread_kind,
            "goal": self.goal_text() or None,
            "met": self.met,
            "note": self.note,
            "skipped": self.skipped,
            "n": len(self.values),
            "values": list(self.values),
        }


# -- the benchmarks ------------------------------------------------------------------------


def _times(n: int) -> str:
    return f"{n} repetition" + ("" if n == 1 else "s")


def _per_rep(reps: int, fn: Callable[[int], float]) -> tuple[float, ...]:
    return tuple(fn(rep) for rep in range(reps))


def _loop(p: Params) -> list[Figure]:
    from benchmarks.bench_loop import journal_calls, proctor_loop

    note = f"{p.loop_steps:,} steps of a noop tool, SQLite file, whole run timed"
    proctor_rates: list[float] = []
    steady: list[float] = []
    tree: list[float] = []
    graph_rates: dict[str, list[float]] = {}
    missing: str | None = None
    try:
        from benchmarks.bench_langgraph import CONFIGS, langgraph_loop
    except ImportError as exc:
        missing = f"skipped ({exc.name} not installed: pip install -e '.[bench]')"
        configs: tuple[str, ...] = ("matched", "default", "sync_api")
    else:
        configs = CONFIGS
    for _ in range(p.reps):
        # Interleaved, so that a slow moment of the machine touches every series.
        rate = proctor_loop(p.loop_steps)
        proctor_rates.append(rate.whole)
        steady.append(rate.steady)
        tree.append(proctor_loop(p.loop_steps, p.tree_files).steady)
        if missing is None:
            for config in CONFIGS:
                graph_rates.setdefault(config, []).append(langgraph_loop(p.loop_steps, config))
    titles = {
        "matched": "LangGraph, AsyncSqliteSaver, durability=sync, synchronous=NORMAL",
        "default": "LangGraph, AsyncSqliteSaver, its defaults (durability=async)",
        "sync_api": "LangGraph, SqliteSaver (blocking), durability=sync, synchronous=NORMAL",
    }
    figures = [
        Figure("loop.proctor", "Durable loop: proctor", "steps/s", tuple(proctor_rates), note=note),
        Figure(
            "loop.proctor_steady",
            "Durable loop: proctor, steady state (first to last step)",
            "steps/s",
            tuple(steady),
            note="the same runs, set-up and end left out",
        ),
        Figure(
            "loop.proctor_tree",
            f"Durable loop: proctor, steady state, workspace of {p.tree_files:,} files",
            "steps/s",
            tuple(tree),
            note="the same loop in a workspace of small source files",
        ),
    ]
    for name in configs:
        figures.append(
            Figure(
                f"loop.langgraph.{name}",
                f"Durable loop: {titles[name]}",
                "steps/s",
                tuple(graph_rates.get(name, ())),
                note=note,
                skipped=missing,
            )
        )
    calls = journal_calls(p.loop_steps)
    figures.append(
        Figure(
            "loop.journal_calls",
            "Durable loop: proctor's journal calls per step (each a transaction)",
            "calls",
            (sum(n for name, n in calls.items() if not name.endswith("(deferred)")),),
            note=", ".join(f"{name} {n:.3g}" for name, n in calls.items()),
        )
    )
    matched = graph_rates.get("matched", [])
    fastest = [max(rates) for rates in zip(*graph_rates.values(), strict=True)]
    figures += [
        Figure(
            "loop.ratio",
            "Durable loop: proctor / LangGraph (matched durability)",
            "x",
            tuple(a / b for a, b in zip(proctor_rates, matched, strict=False)),
            goal=(">=", 20.0),
            note="per repetition, same steps, same machine, same moment",
            skipped=missing,
        ),
        Figure(
            "loop.ratio_fastest",
            "Durable loop: proctor / fastest LangGraph configuration",
            "x",
            tuple(a / b for a, b in zip(proctor_rates, fastest, strict=False)),
            note="per repetition",
            skipped=missing,
        ),
    ]
    return figures


def _dispatch(p: Params) -> list[Figure]:
    from benchmarks.bench_dispatch import dispatch_samples

    records: list[float] = []
    settles: list[float] = []
    for _ in range(p.reps):
        r, s = dispatch_samples(p.effects)
        records += r
        settles += s
    ms = 1000.0
    note = f"{p.effects} effects x {p.reps} journals, real file, FULL sync commit"
    return [
        Figure(
            "dispatch.effect",
            "Durable effect: record_dispatch + settle_effect",
            "ms",
            tuple((a + b) / ms for a, b in zip(records, settles, strict=True)),
            spread="p10-p90",
            goal=("<=", 1.0),
            note=note,
        ),
        Figure(
            "dispatch.record",
            "Durable effect: record_dispatch alone (durable commit)",
            "ms",
            tuple(a / ms for a in records),
            spread="p10-p90",
            note=note,
        ),
        Figure(
            "dispatch.settle",
            "Durable effect: settle_effect alone",
            "ms",
            tuple(b / ms for b in settles),
            spread="p10-p90",
            note=note,
        ),
    ]


def _progress(p: Params) -> list[Figure]:
    from benchmarks import bench_progress as bp

    small, large = p.progress_sizes
    long_judge = bp._judge(large)
    next_large = large
    ratios: list[float] = []
    per_step: list[float] = []
    for _ in range(p.reps):
        short_judge = bp._judge(small)
        short: list[float] = []
        long: list[float] = []
        # Interleaved one step at a time: both sizes meet the same moments of the machine.
        for i in range(p.progress_steps):
            act = bp._act(small + i)
            start = time.perf_counter_ns()
            short_judge.round([act])
            short.append((time.perf_counter_ns() - start) / 1000)
            act = bp._act(next_large + i)
            start = time.perf_counter_ns()
            long_judge.round([act])
            long.append((time.perf_counter_ns() - start) / 1000)
        next_large += p.progress_steps
        ratios.append(statistics.median(long) / statistics.median(short))
        per_step.append(statistics.median(long))
    note = f"median of {p.progress_steps:,} steps per repetition"
    return [
        Figure(
            "progress.ratio",
            f"Progress check: cost at {large:,} / cost at {small:,} steps of history",
            "x",
            tuple(ratios),
            goal=("<=", 1.3),
            note=note,
        ),
        Figure(
            "progress.step",
            f"Progress check: one step at {large:,} steps of history",
            "µs",
            tuple(per_step),
            note=note,
        ),
    ]


def _workset(p: Params) -> list[Figure]:
    from benchmarks import bench_workset as bw

    values = _per_rep(p.reps, lambda _: statistics.median(bw._time_workset(p.workset_size)))
    return [
        Figure(
            "workset.step",
            f"Distinct-work set: add one item and fingerprint, at {p.workset_size:,} items",
            "ns",
            values,
            note=f"median of {bw.WORKSET_STEPS:,} steps per repetition",
        )
    ]


def _ledger(p: Params) -> list[Figure]:
    from benchmarks import bench_ledger as bl

    small, large = bl.SIZES[0], bl.SIZES[-1 if not p.quick else 1]

    def at_size(size: int) -> tuple[float, ...]:
        return _per_rep(p.reps, lambda _: statistics.median(bl.time_steps(size)))

    at = {size: at_size(size) for size in (small, large)}
    ratios = tuple(b / a for a, b in zip(at[small], at[large], strict=True))
    return [
        Figure(
            "ledger.step",
            f"Effect ledger: plan, dispatch and settle one effect at {large:,} effects of history",
            "µs",
            at[large],
            note=f"median of {bl.STEPS:,} steps per repetition",
        ),
        Figure(
            "ledger.ratio",
            f"Effect ledger: cost at {large:,} / cost at {small:,} effects of history",
            "x",
            ratios,
            goal=("<=", 1.1),
        ),
    ]


def _sandbox(p: Params) -> list[Figure]:
    import anyio
    from benchmarks import bench_sandbox as bs

    from proctor.runtime._tools.sandbox import sandbox_available

    reason = sandbox_available()
    if reason is not None:
        return [Figure("sandbox.command", "Sandbox", "ms", skipped=reason)]
    rounds = 10 if p.quick else 100
    with tempfile.TemporaryDirectory() as tmp:
        commands = anyio.run(bs.command_round, Path(tmp), rounds, backend="asyncio")
        checks = anyio.run(bs.check_round, Path(tmp), 3 if p.quick else 5, backend="asyncio")

    def added(variant: str, base: str) -> tuple[float, ...]:
        return tuple(s - b for s, b in zip(commands[variant], commands[base], strict=True))

    note = f"{rounds} rounds, interleaved, {bs.PAUSE * 1000:g} ms apart; wall time of each call"
    rows = [
        ("sandbox.sh", "A plain spawn of sh -c true", "sh"),
        ("sandbox.bwrap", "bwrap --unshare-all --ro-bind / / true", "bwrap"),
        ("sandbox.run_command", "run_command true on the host", "host"),
        ("sandbox.cold", "run_command true in a sandbox made for it", "cold"),
        ("sandbox.command", "run_command true in the sandbox, as a run runs it", "sandboxed"),
    ]
    return [
        *(
            Figure(key, title, "ms", tuple(commands[name]), spread="p10-p90", note=note)
            for key, title, name in rows
        ),
        Figure(
            "sandbox.added",
            "What the sandbox adds to one command (over run_command on the host)",
            "ms",
            added("sandboxed", "host"),
            spread="p10-p90",
            goal=("<", 5.0),
            note=note,
        ),
        Figure(
            "sandbox.added_cold",
            "What a sandbox made for the command adds",
            "ms",
            added("cold", "host"),
            spread="p10-p90",
            note=note,
        ),
        Figure(
            "sandbox.check_host",
            f"A pytest check of {bs.TESTS} tests on the host",
            "ms",
            tuple(checks["host"]),
            spread="p10-p90",
        ),
        Figure(
            "sandbox.check",
            "The same check in the sandbox",
            "ms",
            tuple(checks["sandboxed"]),
            spread="p10-p90",
        ),
    ]


def _budget(p: Params) -> list[Figure]:
    import anyio
    from benchmarks import bench_budget as bb

    from proctor.budgets._budget import Budget

    def counts(_: int) -> float:
        samples = anyio.run(bb._round_trips, Budget(bb._COUNTS), False, backend="asyncio")
        return statistics.median(samples)

    def echo(_: int) -> float:
        return statistics.median(anyio.run(bb._echo_round_trips, backend="asyncio"))

    note = f"median of {bb.ROUND_TRIPS:,} round trips per repetition"
    return [
        Figure(
            "budget.round_trip",
            "Budget: one reservation round trip (reserve, grant, settle, settled)",
            "µs",
            _per_rep(p.reps, counts),
            note=note,
        ),
        Figure(
            "budget.echo",
            "Budget: the same four channel operations, no books kept (the floor)",
            "µs",
            _per_rep(p.reps, echo),
            note=note,
        ),
    ]


def _concurrency(p: Params) -> list[Figure]:
    from benchmarks.bench_concurrency import measure_in_child

    # The way to host many runs: one open journal for all of them.
    shared = [measure_in_child(p.runs, p.run_steps, layout="one_connection") for _ in range(p.reps)]
    extra = 1 if p.quick else 2
    traced = [
        measure_in_child(p.runs, 0, layout="one_connection", trace=True) for _ in range(extra)
    ]
    apart = [measure_in_child(p.runs, p.run_steps) for _ in range(extra)]
    kib = 1024.0
    note = f"{p.runs:,} runs on one open journal, a fresh process per repetition"
    apart_note = (
        f"{p.runs:,} runs, each opening a journal file of its own (a connection and a "
        f"thread each), {_times(extra)}"
    )
    return [
        Figure(
            "concurrency.steps",
            f"{p.runs:,} concurrent runs: total steps/s ({p.run_steps} noop steps each)",
            "steps/s",
            tuple(r["steady_steps_per_s"] for r in shared),
            goal=(">=", 10_000.0),
            note=note + "; from the release of the parked runs until every run has "
            "journaled its steps",
        ),
        Figure(
            "concurrency.steps_with_ends",
            f"{p.runs:,} concurrent runs: total steps/s, the runs' ends included",
            "steps/s",
            tuple(r["steps_per_s"] for r in shared),
            note=note + "; until the last run ended (each end a durable commit)",
        ),
        Figure(
            "concurrency.cpu_per_step",
            f"{p.runs:,} concurrent runs: CPU time per step, all threads, ends included",
            "ms",
            tuple(1000 * r["steps_cpu_s"] / (p.runs * p.run_steps) for r in shared),
            note="event loop's thread: "
            + ", ".join(
                f"{100 * r['steps_main_cpu_s'] / r['steps_cpu_s']:.0f}%"
                for r in shared
                if r["steps_cpu_s"]
            ),
        ),
        Figure(
            "concurrency.idle_rss",
            "Idle run: resident memory (RSS delta / runs, all parked on their actor)",
            "KiB",
            tuple(r["rss_per_run"] / kib for r in shared),
            goal=("<=", 64.0),
            note=note,
        ),
        Figure(
            "concurrency.idle_heap",
            "Idle run: Python heap alone (tracemalloc delta / runs)",
            "KiB",
            tuple(r["heap_per_run"] / kib for r in traced),
            note=note + f"; {_times(extra)}",
        ),
        Figure(
            "concurrency.start",
            f"{p.runs:,} concurrent runs: start until all are parked",
            "s",
            tuple(r["start_s"] for r in shared),
            note=note,
        ),
        Figure(
            "concurrency.apart_steps",
            f"{p.runs:,} concurrent runs, a journal file each: total steps/s",
            "steps/s",
            tuple(r["steady_steps_per_s"] for r in apart),
            note=apart_note,
        ),
        Figure(
            "concurrency.apart_rss",
            "Idle run with a journal file of its own: resident memory",
            "KiB",
            tuple(r["rss_per_run"] / kib for r in apart),
            note=apart_note,
        ),
        Figure(
            "concurrency.apart_start",
            f"{p.runs:,} concurrent runs, a journal file each: start until all are parked",
            "s",
            tuple(r["start_s"] for r in apart),
            note=apart_note,
        ),
    ]


def _resume(p: Params) -> list[Figure]:
    from benchmarks.bench_resume import build, resume_seconds, temporary_root

    with temporary_root() as tmp:
        history = build(p.resume_steps, Path(tmp))
        size = history.journal.stat().st_size
        values = _per_rep(p.reps, lambda rep: resume_seconds(history, f"rep-{rep}"))
        died = history.died
        assert died is not None
        died_values = _per_rep(p.reps, lambda rep: resume_seconds(died, f"died-{rep}"))
    return [
        Figure(
            "resume.first_observation",
            f"Resume of a run with {p.resume_steps:,} steps: until the first observation",
            "s",
            values,
            goal=("<", 1.0),
            note=f"journal of {size / 2**20:,.0f} MiB; a fresh copy per repetition",
        ),
        Figure(
            "resume.died",
            f"Resume of a run of {died.steps:,} steps whose host died (no end snapshot)",
            "s",
            died_values,
            goal=("<", 1.0),
            note="the dead run is ended, its latest periodic snapshot restored, "
            "the steps after it replayed",
        ),
        Figure(
            "resume.build",
            f"Writing that history ({p.resume_steps:,} steps, batches of 1,000)",
            "s",
            (history.build_seconds,),
            note="once per benchmark run; includes one spend row set per step",
        ),
    ]


def _postgres(p: Params) -> list[Figure]:
    url = os.environ.get(PG_URL_ENV)
    if not url:
        return [
            Figure(
                "postgres",
                "PostgreSQL journal vs SQLite",
                "",
                skipped=f"skipped (no server: set {PG_URL_ENV})",
            )
        ]
    import anyio
    from benchmarks.bench_dispatch import dispatch_samples
    from benchmarks.bench_loop import proctor_loop_at

    def loop(target: str | None) -> float:
        with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
            rate = anyio.run(proctor_loop_at, p.loop_steps, Path(tmp), target, backend="asyncio")
        return rate.whole

    # Interleaved, so that both backends see the machine at the same moments.
    pairs = [(loop(url), loop(None)) for _ in range(p.reps)]
    samples: list[float] = []
    for _ in range(p.reps):
        records, settles = dispatch_samples(p.effects, url)
        samples += [(a + b) / 1000 for a, b in zip(records, settles, strict=True)]
    return [
        Figure(
            "postgres.loop",
            "Durable loop on PostgreSQL",
            "steps/s",
            tuple(pg for pg, _ in pairs),
            note=f"{p.loop_steps:,} steps",
        ),
        Figure(
            "postgres.loop_sqlite",
            "Durable loop on SQLite, interleaved with the PostgreSQL runs",
            "steps/s",
            tuple(lite for _, lite in pairs),
            note=f"{p.loop_steps:,} steps, a run on each backend in turn",
        ),
        Figure(
            "postgres.ratio",
            "Durable loop: SQLite steps/s over PostgreSQL steps/s",
            "x",
            tuple(lite / pg for pg, lite in pairs),
            goal=("<=", 2.0),
            note="per pair of interleaved runs",
        ),
        Figure(
            "postgres.effect",
            "Durable effect on PostgreSQL: record_dispatch + settle_effect",
            "ms",
            tuple(samples),
            spread="p10-p90",
            note="compare dispatch.effect (SQLite)",
        ),
    ]


def _journal(p: Params) -> list[Figure]:
    from benchmarks import bench_journal as bj
    from benchmarks.bench_loop import proctor_loop

    histories = bj.HISTORIES if not p.quick else bj.HISTORIES[:3]
    base = histories[0]
    figures: list[Figure] = []
    at: dict[int, tuple[float, ...]] = {}
    for history in histories:
        at[history] = tuple(bj.effect_step_ms(history) for _ in range(p.reps))
    for history in histories:
        figures.append(
            Figure(
                f"journal.effect_step_{history}",
                f"Effectful step at {history:,} effects of history (resumed run)",
                "ms",
                at[history],
                note=f"median of {bj.STEPS} do-nothing effectful steps per repetition",
            )
        )
    resumed = tuple(bj.resume_seconds(10_000) for _ in range(p.reps))
    figures.append(
        Figure(
            "journal.resume_10k",
            "Resume of a task with 10,000 settled effects: until the first observation",
            "s",
            resumed,
            goal=("<", 0.2),
        )
    )
    for history in histories[1:]:
        figures.append(
            Figure(
                f"journal.effect_ratio_{history}",
                f"Effectful step: at {history:,} / at {base:,} effects of history",
                "x",
                tuple(b / a for a, b in zip(at[base], at[history], strict=True)),
                goal=("<=", 1.1),
            )
        )
    command, plain, runner, bare, bare_sandboxed = [], [], [], [], []
    for _ in range(p.reps):
        command.append(bj.command_step_ms())
        plain.append(bj.command_step_ms(sandboxed=False))
        runner.append(bj.runner_ms())
        bare.append(bj.bare_step_ms())
        bare_sandboxed.append(bj.bare_step_ms(sandboxed=True))
    figures += [
        Figure(
            "journal.command_step",
            "Command step (run_command true), empty workspace",
            "ms",
            tuple(command),
            note="sandboxed, as every command; median of 50 steps",
        ),
        Figure(
            "journal.bare_step",
            "Bare sh -c true spawn + one durable commit",
            "ms",
            tuple(bare),
            note="asyncio subprocess, aiosqlite, synchronous=FULL",
        ),
        Figure(
            "journal.bare_sandboxed_step",
            "Bare sh -c true spawn in a sandbox made for it + one durable commit",
            "ms",
            tuple(bare_sandboxed),
            note="the command's bubblewrap sandbox, cgroup and limits (launch), then the commit",
        ),
        Figure(
            "journal.command_step_off",
            "Command step (run_command true), empty workspace, sandbox off",
            "ms",
            tuple(plain),
            note="the same steps without bubblewrap: what the runtime adds",
        ),
        Figure(
            "journal.runner",
            "run_command true alone (no run, no journal), sandbox off",
            "ms",
            tuple(runner),
            note="the process runner's share; the rest is the controller's and the journal's",
        ),
        Figure(
            "journal.command_off_ratio",
            "Command step, sandbox off / bare spawn + durable commit",
            "x",
            tuple(c / b for c, b in zip(plain, bare, strict=True)),
            goal=("<=", 1.5),
        ),
        Figure(
            "journal.command_ratio",
            "Command step / bare sandboxed spawn + durable commit",
            "x",
            tuple(c / b for c, b in zip(command, bare_sandboxed, strict=True)),
            goal=("<=", 1.5),
        ),
        Figure(
            "journal.command_sh_ratio",
            "Command step (sandboxed) / bare spawn + durable commit",
            "x",
            tuple(c / b for c, b in zip(command, bare, strict=True)),
            note="what one sandbox a command costs over a bare spawn; see docs/performance.md",
        ),
    ]
    for kind in bj.KINDS:
        size = bj.bytes_per_step(kind)
        figures += [
            Figure(
                f"journal.bytes_{kind}",
                f"Journal bytes per {kind} step, 2 KB payload",
                "bytes",
                (size,),
                note="growth from 10 to 110 steps, VACUUM INTO",
            ),
            Figure(
                f"journal.bytes_ratio_{kind}",
                f"Journal bytes per {kind} step / 2,048",
                "x",
                (size / bj.PAYLOAD,),
                goal=("<=", 1.5),
            ),
        ]
    floor, inline, loop = [], [], []
    for _ in range(p.reps):
        floor.append(bj.floor_step_us())
        inline.append(bj.inline_floor_step_us())
        loop.append(1e6 / proctor_loop(p.loop_steps).steady)
    figures += [
        Figure(
            "journal.floor",
            "Bare aiosqlite transaction of a noop step's rows",
            "µs",
            tuple(floor),
            note="a 2.2 KB step row and one spend record, synchronous=NORMAL",
        ),
        Figure(
            "journal.floor_inline",
            "The same transaction through sqlite3 in the loop's thread (no hop)",
            "µs",
            tuple(inline),
        ),
        Figure("journal.loop_step", "Durable loop step (steady state)", "µs", tuple(loop)),
        Figure(
            "journal.loop_ratio",
            "Durable loop step / bare transaction",
            "x",
            tuple(a / b for a, b in zip(loop, floor, strict=True)),
            goal=("<=", 1.5),
        ),
    ]
    return figures


BENCHMARKS: dict[str, Callable[[Params], list[Figure]]] = {
    "loop": _loop,
    "dispatch": _dispatch,
    "progress": _progress,
    "workset": _workset,
    "ledger": _ledger,
    "budget": _budget,
    "concurrency": _concurrency,
    "resume": _resume,
    "sandbox": _sandbox,
    "postgres": _postgres,
    "journal": _journal,
}


def measure(names: Sequence[str], params: Params) -> tuple[list[Figure], dict[str, float]]:
    """
    Run the named benchmarks.

    Returns:
        The figures, and the seconds each benchmark took.
    """
    figures: list[Figure] = []
    durations: dict[str, float] = {}
    for name in names:
        start = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        figures += BENCHMARKS[name](params)
        durations[name] = round(time.perf_counter() - start, 1)
    return figures, durations


# -- profiles ----------------------------------------------------------------------------


@attrs.define(eq=False)
class Window:
    """
    A profiled stretch of a benchmark: ``with window:`` around the part that counts.

    It keeps the wall time, the process CPU time and the main thread's CPU time
    spent inside. The profiler is cProfile, or pyinstrument in its async mode
    (wall time charged to the coroutine that awaits it), when ``sampler`` is set.
    """

    sampler: Any = None
    profiler: cProfile.Profile = attrs.field(factory=cProfile.Profile)
    wall: float = 0.0
    cpu: float = 0.0
    main_cpu: float = 0.0
    _marks: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __enter__(self) -> Window:
        self._marks = (time.perf_counter(), time.process_time(), time.thread_time())
        if self.sampler is not None:
            self.sampler.start()
        else:
            self.profiler.enable()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        else:
            self.profiler.disable()
        wall, cpu, main_cpu = self._marks
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.main_cpu += time.thread_time() - main_cpu


def _profiled(name: str, p: Params, window: Window) -> None:
    """Run one repetition of a benchmark's main figure, its part that counts in ``window``."""
    import anyio

    # Every window is entered inside the event loop, so an async profiler sees the tasks.
    async def in_window(make: Callable[[Path], Any]) -> None:
        with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
            awaitable = make(Path(tmp))
            with window:
                await awaitable

    if name == "loop":
        from benchmarks.bench_loop import proctor_loop_at

        anyio.run(in_window, lambda tmp: proctor_loop_at(p.loop_steps, tmp), backend="asyncio")
    elif name == "dispatch":
        from benchmarks.bench_dispatch import dispatch_samples_at

        anyio.run(
            in_window, lambda tmp: dispatch_samples_at(tmp / "j.db", p.effects), backend="asyncio"
        )
    elif name == "concurrency":
        from benchmarks.bench_concurrency import concurrent_runs

        # The steps of the released runs, not their start.
        with tempfile.TemporaryDirectory(prefix="proctor-bench-") as tmp:
            anyio.run(
                lambda: concurrent_runs(
                    p.runs, p.run_steps, Path(tmp), layout="one_connection", window=window
                ),
                backend="asyncio",
            )
    elif name == "resume":
        from benchmarks.bench_resume import build, temporary_root, time_resume

        # The resume, not the writing of its history.
        with temporary_root() as root:
            history = build(p.resume_steps, Path(root))
            anyio.run(
                in_window,
                lambda tmp: time_resume(history, history.copy("profiled")),
                backend="asyncio",
            )
    else:
        raise SystemExit(f"no profile for {name!r}: profile {', '.join(PROFILED)}")


PROFILED = ("loop", "dispatch", "concurrency", "resume")


def _header(name: str, params: Params, window: Window, tool: str) -> str:
    return (
        f"profile of {name} ({'quick' if params.quick else 'full'} sizes), {tool}\n"
        f"wall {window.wall:.2f} s; CPU {window.cpu:.2f} s, of which the main thread "
        f"{window.main_cpu:.2f} s (the rest: SQLite's threads, which no profiler here "
        "sees)\n\n"
    )


def profile(name: str, params: Params) -> str:
    """
    Run one repetition of ``name`` under cProfile, then under pyinstrument if it is
    installed; write the reports to ``benchmarks/results/profile-NAME*.txt`` and
    return them.
    """
    window = Window()
    _profiled(name, params, window)
    out = io.StringIO()
    out.write(_header(name, params, window, "cProfile"))
    stats = pstats.Stats(window.profiler, stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(r"proctor|aiosqlite", 45)
    text = re.sub(r" +\n", "\n", out.getvalue())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"profile-{name}.txt").write_text(text)
    try:
        from pyinstrument import Profiler
    except ImportError:
        return text + "\n(pip install pyinstrument for the async-aware profile)\n"
    window = Window(sampler=Profiler(interval=0.0005, async_mode="enabled"))
    _profiled(name, params, window)
    tree = window.sampler.output_text(unicode=True, time="percent_of_total")
    async_text = _header(name, params, window, "pyinstrument (async mode)") + tree
    (RESULTS / f"profile-{name}-async.txt").write_text(async_text)
    return f"{text}\n{async_text}"


# -- the report ---------------------------------------------------------------------------


def _number(value: float) -> str:
    """Three significant digits, thousands separated."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:#.3g}"


def _row(figure: dict[str, Any]) -> list[str]:
    """A row of the table, from a figure as :meth:`Figure.to_json` gives it."""
    goal = figure["goal"] or ""
    if figure["skipped"] is not None:
        return [figure["title"], "-", "", figure["unit"], goal, figure["skipped"]]
    median, low, high, met = figure["median"], figure["low"], figure["high"], figure["met"]
    return [
        figure["title"],
        _number(median) if median is not None else "",
        f"{_number(low)}\u2013{_number(high)} ({figure['spread']})" if low is not None else "",
        figure["unit"],
        goal,
        "" if met is None else ("yes" if met else "NO"),
    ]


HEADER = ["figure", "median", "spread", "unit", "goal", "met?"]


def table(figures: Sequence[Figure | dict[str, Any]], markdown: bool = False) -> str:
    """The figures (or their JSON) as a text table, or a Markdown one."""
    rows = [_row(f.to_json() if isinstance(f, Figure) else f) for f in figures]
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "| --- | ---: | ---: | --- | --- | --- |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    right = {1, 2}
    lines = []
    for row in [HEADER, *rows]:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cpu_model() -> str:
    lscpu = shutil.which("lscpu")
    if lscpu is not None:
        done = subprocess.run([lscpu], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _commit() -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    done = subprocess.run(
        [git, "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or None


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in (
        "proctor",
        "anyio",
        "aiosqlite",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "asyncpg",
    ):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory": _memory(),
        "platform": platform.platform(),
        "implementation": platform.python_implementation(),
        "loadavg": list(os.getloadavg()),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks, print the table, write the JSON; return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="Run proctor's benchmarks side by side with LangGraph; print one table.",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run, under a minute")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"profile one repetition of each chosen benchmark ({', '.join(PROFILED)})",
    )
    parser.add_argument("--out", type=Path, help="where to write the JSON results")
    parser.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    parser.add_argument(
        "--show", type=Path, metavar="JSON", help="print the table of earlier results, run nothing"
    )
    args = parser.parse_args(argv)
    from benchmarks.bench_loop import quiet_logs

    quiet_logs()
    if args.show is not None:
        print(table(json.loads(args.show.read_text())["figures"], markdown=args.markdown))
        return 0
    params = Params.smoke() if args.quick else Params.full()
    names = args.only or list(BENCHMARKS)
    if args.profile:
        for name in args.only or PROFILED:
            print(profile(name, params))
        return 0
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    clock = time.perf_counter()
    figures, durations = measure(names, params)
    total = time.perf_counter() - clock
    print(table(figures, markdown=args.markdown))
    print(f"\n{'quick' if params.quick else 'full'} run: {total:.0f} s ({durations})")
    # Only a full run of everything writes results.json: a part never overwrites the whole.
    name = "results-quick.json" if params.quick else "results.json"
    if args.only:
        name = name.replace("results", "results-" + "-".join(args.only))
    out = args.out or RESULTS / name
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "date": started.isoformat(timespec="seconds"),
        "quick": params.quick,
        "params": attrs.asdict(params),
        "machine": before,
        "loadavg_after": list(os.getloadavg()),
        "versions": _versions(),
        "commit": _commit(),
        "argv": list(sys.argv if argv is None else argv),
        "durations_s": {**durations, "total": round(total, 1)},
        "figures": [f.to_json() for f in figures],
    }
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
