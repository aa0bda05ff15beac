"""
Rebuild the real set (tests/real/set) from the original files with proctor's importers.

    python tests/real/build_set.py RAW_DIR

RAW_DIR holds the original files as they are in their repositories, laid out as
``<format>/<file>`` as tests/real/sources.json names them (one entry per file:
format, file, repo, path, commit, licence). tests/real/raw is a part of it, the
files the importer tests read; every other file is at the commit its entry names
in a public repository.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from proctor.runtime._importers import dump_jsonl, import_file
from proctor.runtime._importers.evallog import inspect_samples
from proctor.runtime._importers.openhands import openhands_runs

HERE = Path(__file__).resolve().parent
SET = HERE / "set"
CONSTRUCTED = HERE / "constructed"
# No public run ended by a loop detector could be found (docs/progress.md): the
# looped side is constructed from real runs' own actions, each labelled so.
# (set file, how many times its first repeatable segment is repeated)
LOOP_SOURCES = (
    "mini/django__django-16255.jsonl",
    "mini/sympy__sympy-13480.jsonl",
    "mini/astropy__astropy-7336.jsonl",
    "sweagent/pydicom-1458.jsonl",
    "openhands/resolver_output-1.jsonl",
    "claude/agent-a7be2f0.jsonl",
    "codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl",
    "gemini/session-2026-01-16T11-01-file-ops-37b7abef.jsonl",
)
# A log with no assistant turn: nothing to replay.
SKIP = {"inspect/log_tool_call_error.json"}


def outcome(fmt: str, run: dict[str, Any], events: list[dict[str, Any]]) -> tuple[str, str]:
    """succeeded, looped or other, and why."""
    if fmt == "openhands" and run.get("error"):
        error = str(run["error"])
        if "StuckInLoop" in error or "stuck in a loop" in error.lower():
            return "looped", error[:120]
        return "other", error[:120]
    verdicts = [e for e in events if e["type"] == "verdict"]
    if any(e["type"] == "signal" and e["name"] == "deadline" for e in events):
        return "other", "budget/limit ending"
    if verdicts:
        ok = all(v["passed"] for v in verdicts)
        named = ", ".join(f"{v['check']}={'pass' if v['passed'] else 'fail'}" for v in verdicts)
        return ("succeeded" if ok else "other"), "harness: " + named
    if any(e["type"] == "signal" and e["name"] in ("user_stop", "stop_signal") for e in events):
        return "other", "interrupted by the user"
    if any(e["type"] == "message" and e["kind"] == "final_answer" for e in events):
        return "succeeded", "completed normally (submitted / finished), no harness verdict"
    if fmt in ("openhands", "sweagent", "mini", "inspect"):
        return "other", "ended without a finish/submission or verdict"
    return "succeeded", "interactive session ended normally, no verdict recorded"


def build(raw: Path) -> list[dict[str, Any]]:
    sources = json.loads((HERE / "sources.json").read_text(encoding="utf-8"))
    index: list[dict[str, Any]] = []
    for source in sources:
        rel = source["file"]
        if rel.endswith(".report.json") or rel in SKIP:
            continue
        path = raw / rel
        fmt = source["format"]
        runs: list[int | None] = [None]
        if fmt == "openhands":
            runs = list(range(len(openhands_runs(path))))
        elif fmt == "inspect":
            runs = list(range(len(inspect_samples(path))))
        base = re.sub(r"(\.traj\.json|\.traj|\.jsonl|\.json|\.eval)$", "", Path(rel).name)
        for k in runs:
            header, events = import_file(path, fmt, **({} if k is None else {"index": k}))
            run: dict[str, Any] = {}
            name = base
            if fmt == "openhands":
                assert k is not None
                run = openhands_runs(path)[k]
                if len(runs) > 1:
                    name = f"{base}-{run.get('instance_id') or k}"
            elif fmt == "inspect" and len(runs) > 1:
                name = f"{base}-s{k}"
            label, why = outcome(fmt, run, events)
            out = SET / fmt / f"{name}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            dump_jsonl(header, events, out)
            entry: dict[str, Any] = {
                "file": f"{fmt}/{name}.jsonl",
                "format": fmt,
                "outcome": label,
                "why": why,
                "events": len(events),
                "raw": rel,
                "source": {key: source[key] for key in ("repo", "path", "commit", "licence")},
            }
            if k is not None:
                entry["run_index"] = k
            index.append(entry)
    (SET / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    construct(index)
    write_sources(index)
    return index


_NOTES = """
Full commits are in set/index.json (`source.commit`); tests/real/sources.json lists every
original file, and tests/real/raw holds the ones the importer tests read.

Notes on provenance and licences:
- mini/*: trajectories of mini-swe-agent v1.15.0 with Gemini 3 Pro on SWE-bench Verified
  (run 20251118), republished with their harness reports
  (`swebench_results/20251118_gemini-3-pro-74pct/logs/<id>/report.json`) in the fork
  gruckion/mini-swe-agent; the repository is MIT, the data were first published by the
  SWE-bench experiments project, which states no separate data licence. Of its 500 runs the
  set holds 35 chosen first plus the 37 on which proctor before or after the trajectory
  additions, or the OpenHands rule, stopped before the last event (docs/progress.md).
  `mini/upstream_*` are SWE-agent/mini-swe-agent's own test data (MIT).
- sweagent/*: SWE-agent test data and demonstrations (two are replayed human demonstrations).
- claude/*: real Claude Code transcripts committed as test fixtures of marot/spotter (MIT).
- codex/*, gemini/*: real session files committed as test fixtures of codemie-ai/codemie-code
  (Apache-2.0); the two large Codex rollouts are from commit 60fbed2 (later removed).
- openhands/*: OpenHands test/evaluation fixtures (MIT) and one software-agent-sdk event
  stream (MIT).
- inspect/*: UKGovernmentBEIS/inspect_ai test logs (MIT).
- constructed/*: not runs. No public run ended by a loop detector (an OpenHands
  `AgentStuckInLoopError`, a SWE-agent `exit_cost`) could be found; every hit was a
  synthetic string in a unit test. Each constructed file is a real run's events up to one
  of its real actions, then that action and its real result repeated (or two real actions
  alternating); constructed/index.json says which.
"""


def write_sources(index: list[dict[str, Any]]) -> None:
    lines = [
        "# Sources of the real trajectory set",
        "",
        "Every file under set/ was converted by proctor's importers (`proctor import`; this",
        "directory's build_set.py) from a file in a public GitHub repository. Tool outputs",
        "longer than 2,000 characters were trimmed by the importer (the first and last 1,000",
        "kept, a `[... N characters trimmed by importer ...]` marker between); message texts",
        "at 4,000 the same way.",
        "",
        "Outcomes: `succeeded` = resolved by the SWE-bench harness, every scorer passed, or",
        "the run ended normally by its own submit or finish; `looped` = ended by a peer's",
        "loop detector (none found); `other` = unresolved, a budget or iteration limit, or",
        "interrupted.",
        "",
        "| file | outcome | why | source repo | path | commit | licence |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in index:
        s = r["source"]
        run = f" (run {r['run_index']})" if "run_index" in r else ""
        lines.append(
            f"| {r['file']} | {r['outcome']} | {r['why']} | {s['repo']} | {s['path']}{run} "
            f"| {s['commit'][:12]} | {s['licence']} |"
        )
    text = "\n".join(lines) + "\n" + _NOTES
    (HERE / "SOURCES.md").write_text(text, encoding="utf-8")


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return lines[0], lines[1:]


def construct(index: list[dict[str, Any]]) -> None:
    """
    Write the constructed loops: a real run's events up to one of its real actions,
    then that action with its real result repeated (a repeated failure when the run
    has a failing action, otherwise a repeated read), or two real actions
    alternating. Nothing in them was invented but the repetition.
    """
    entries: list[dict[str, Any]] = []
    by_file = {entry["file"]: entry for entry in index}
    for rel in LOOP_SOURCES:
        header, events = _read(SET / rel)
        # Verdicts judge the real run, not the constructed one.
        header["task"].pop("checks", None)
        actions = [
            i for i, e in enumerate(events) if e["type"] == "action" and not e.get("changed")
        ]
        failing = [i for i in actions if events[i]["result"]["status"] == "error"]
        pick = failing[0] if failing else actions[0]
        prefix = [e for e in events[:pick] if e["type"] != "verdict"]
        repeated = {k: v for k, v in events[pick].items() if k != "round"}
        kind = "repeated_failure" if failing else "repeated_action"
        name = Path(rel).stem
        body = [*prefix, *[dict(repeated) for _ in range(8)]]
        out = CONSTRUCTED / f"{Path(rel).parent}-{name}-{kind}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        dump_jsonl(header, body, out)
        source = by_file[rel]
        entries.append(
            {
                "file": out.name,
                "outcome": "looped",
                "constructed": True,
                "from": rel,
                "loop": kind,
                "loop_starts": len(prefix) + 1,
                "events": len(body),
                "how": f"events 1-{len(prefix)} of {rel}, then its event {pick + 1} "
                "(a real action and its real result) 8 times",
                "source": source["source"],
            }
        )
        # Two real actions alternating, the other loop shape peers detect.
        later = [i for i in actions if i > pick and events[i]["args"] != events[pick]["args"]]
        if later:
            other = {k: v for k, v in events[later[0]].items() if k != "round"}
            body = [*prefix, *[dict(x) for _ in range(5) for x in (repeated, other)]]
            out = CONSTRUCTED / f"{Path(rel).parent}-{name}-alternating.jsonl"
            dump_jsonl(header, body, out)
            entries.append(
                {
                    "file": out.name,
                    "outcome": "looped",
                    "constructed": True,
                    "from": rel,
                    "loop": "alternating",
                    "loop_starts": len(prefix) + 1,
                    "events": len(body),
                    "how": f"events 1-{len(prefix)} of {rel}, then its events {pick + 1} and "
                    f"{later[0] + 1} alternating, 5 times each",
                    "source": source["source"],
                }
            )
    (CONSTRUCTED / "index.json").write_text(json.dumps(entries, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    built = build(Path(sys.argv[1]))
    print(f"{len(built)} runs written to {SET}")
