"""
Score a no-progress policy on a set of real runs: false stops on runs that
succeeded, stops on runs that did not (wasted) and on looped runs, for proctor
and for the OpenHands stuck rule (tests/support/openhands_rule.py).

    python tests/real/score.py [SET_DIR ...]

A set directory holds trajectories and an ``index.json`` of entries with ``file``
and ``outcome`` (``succeeded``, ``looped`` or ``other``). A stop counts when it
comes before the run's last action or message (a stop on the last one, or on a
verdict or signal after it, ends nothing early).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from proctor.runtime._progress.trajectory import read_trajectory, replay

if __name__ == "__main__":  # run as a script: the repository's root holds `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.openhands_rule import stuck_analysis

HERE = Path(__file__).resolve().parent


def last_agent_event(events: list[dict[str, Any]]) -> int:
    return max(
        (i for i, e in enumerate(events, 1) if e["type"] in ("action", "message")), default=0
    )


def decide(path: Path) -> dict[str, Any]:
    """What proctor and the OpenHands rule decide on one trajectory."""
    lines = path.read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines[1:]]
    result = replay(read_trajectory(path))
    at, loop = stuck_analysis(events)
    last = last_agent_event(events)
    proctor_early = (
        result.disposition == "no_progress"
        and result.stopped_at is not None
        and result.stopped_at < last
    )
    return {
        "proctor": result.stop_reason if proctor_early else None,
        "proctor_at": result.stopped_at if proctor_early else None,
        "openhands": loop if at is not None and at < last else None,
        "openhands_at": at if at is not None and at < last else None,
        "last": last,
    }


def score(directory: Path) -> dict[str, Any]:
    """The figures of one set, and each run's decisions."""
    index = json.loads((directory / "index.json").read_text(encoding="utf-8"))
    runs = {entry["file"]: {**entry, **decide(directory / entry["file"])} for entry in index}
    figures: dict[str, Any] = {}
    for outcome in ("succeeded", "other", "looped"):
        group = [r for r in runs.values() if r["outcome"] == outcome]
        figures[outcome] = {
            "runs": len(group),
            "proctor": sum(r["proctor"] is not None for r in group),
            "openhands": sum(r["openhands"] is not None for r in group),
        }
    return {"figures": figures, "runs": runs}


def main(directories: Iterable[str]) -> None:
    for name in directories:
        result = score(Path(name))
        print(name, json.dumps(result["figures"]))
        for file, run in sorted(result["runs"].items()):
            if run["proctor"] or run["openhands"]:
                print(
                    f"  {run['outcome']:9} {file}: proctor {run['proctor']}@{run['proctor_at']} "
                    f"openhands {run['openhands']}@{run['openhands_at']} (last {run['last']})"
                )


if __name__ == "__main__":
    main(sys.argv[1:] or [str(HERE / "set"), str(HERE / "constructed")])
