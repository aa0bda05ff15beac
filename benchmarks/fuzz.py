"""
The long fuzz run: the strategies of ``tests/support/fuzz.py`` for many cases.

    python benchmarks/fuzz.py [--cases N] [--json]

N cases (default 100,000) are shared out over the five inputs by their cost:
proposals 30%, trajectories 15%, task files 20%, journal rows 30%, damaged
journal files (each opened and read whole) 5%. A crash is a case the
runtime answered with anything but its own answer; a hang is a case that took
longer than HANG_SECONDS. Both are counted, with the first few reported. The
figures are in docs/robustness.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import structlog  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.support import fuzz  # noqa: E402

from proctor import Completion, ScriptedActor, Task, ToolCall, run  # noqa: E402
from proctor.verifiers._checks import CommandCheck  # noqa: E402

#: A case that takes longer than this is a hang.
HANG_SECONDS = 10


class Hang(Exception):
    """A case ran past HANG_SECONDS."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang


def _campaign(
    name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], Any], cases: int
) -> dict[str, Any]:
    stats: dict[str, Any] = {"cases": 0, "crashes": 0, "hangs": 0, "examples": [], "slowest": 0.0}
    outcomes: collections.Counter[str] = collections.Counter()

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def one(case: Any) -> None:
        stats["cases"] += 1
        signal.alarm(HANG_SECONDS)
        began = time.monotonic()
        try:
            outcome = check(case)
            outcomes[str(outcome) if outcome is not None else "ok"] += 1
            # The alarm may land in code that swallows it (a gc callback): the
            # clock decides too.
            if time.monotonic() - began > HANG_SECONDS:
                raise Hang
        except Hang:
            stats["hangs"] += 1
            stats["examples"].append(f"hang ({time.monotonic() - began:.1f} s): {case!r:.300}")
        except fuzz.Crash as exc:
            stats["crashes"] += 1
            if len(stats["examples"]) < 5:
                stats["examples"].append(f"{exc}"[:500])
        finally:
            signal.alarm(0)
            stats["slowest"] = max(stats["slowest"], round(time.monotonic() - began, 2))

    started = time.monotonic()
    one()
    stats["seconds"] = round(time.monotonic() - started, 1)
    stats["outcomes"] = dict(outcomes)
    print(
        f"{name}: {stats['cases']} cases, {stats['crashes']} crashes, {stats['hangs']} hangs,"
        f" {stats['seconds']} s",
        file=sys.stderr,
    )
    return stats


def _journal_bytes(root: Path) -> bytes:
    workspace = root / "w"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    task = Task(
        goal="g", workspace=workspace, checks=(CommandCheck("t", [sys.executable, "-c", "pass"]),)
    )
    actor = ScriptedActor(
        [
            ToolCall("read_file", {"path": "a.txt"}),
            ToolCall("write_file", {"path": "a.txt", "content": "b\n"}),
            Completion(),
        ]
    )
    anyio.run(run, task, actor, root / "j.db")
    return fuzz.plain_journal(root / "j.db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    signal.signal(signal.SIGALRM, _alarm)
    # Shares by cost: a trajectory replay costs about three proposals.
    shares = {"proposals": 30, "trajectories": 15, "task_files": 20, "journal_rows": 30}
    share = {name: args.cases * part // 100 for name, part in shares.items()}
    share["journal_files"] = args.cases - sum(share.values())
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="proctor-fuzz-") as tmp:
        home = fuzz.task_home(Path(tmp) / "task")
        base = _journal_bytes(Path(tmp))
        damaged = Path(tmp) / "damaged.db"
        report["proposals"] = _campaign(
            "proposals", fuzz.proposals, fuzz.check_proposal, share["proposals"]
        )
        report["trajectories"] = _campaign(
            "trajectories", fuzz.trajectories(), fuzz.check_trajectory, share["trajectories"]
        )
        report["task_files"] = _campaign(
            "task_files",
            fuzz.task_files(),
            lambda data: fuzz.check_task_file(home, data),
            share["task_files"],
        )
        report["journal_rows"] = _campaign(
            "journal_rows", fuzz.journal_rows(), fuzz.check_journal_row, share["journal_rows"]
        )
        report["journal_files"] = _campaign(
            "journal_files",
            fuzz.journal_flips(len(base)),
            lambda flips: anyio.run(fuzz.check_journal_file, base, flips, damaged),
            share["journal_files"],
        )
    total = {
        "cases": sum(r["cases"] for r in report.values()),
        "crashes": sum(r["crashes"] for r in report.values()),
        "hangs": sum(r["hangs"] for r in report.values()),
        "seconds": round(sum(r["seconds"] for r in report.values()), 1),
    }
    report["total"] = total
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{total['cases']:,} cases: {total['crashes']} crashes, {total['hangs']} hangs, "
            f"{total['seconds']} s"
        )
    raise SystemExit(1 if total["crashes"] or total["hangs"] else 0)


if __name__ == "__main__":
    main()
