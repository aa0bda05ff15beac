"""
``proctor replay FILE --json`` on recorded trajectories, checked against the public contract.

Every file in ``tests/trajectories`` has one entry in :data:`EXPECTED`, written from
the trajectory format's contract (docs/trajectory.md) and the design's progress
section, not from the implementation. Each replay runs the real command in a
subprocess; the subprocesses run a few at a time in one loop, once per module.

An entry marked ``xfail`` records a case where the contract and the implementation
disagree: the expectation stays what the contract says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pytest

TRAJECTORIES = Path(__file__).resolve().parents[1] / "trajectories"

DISPOSITIONS = {
    "completed",
    "partial",
    "blocked",
    "needs_input",
    "budget_exhausted",
    "no_progress",
    "stopped",
    "failed",
    "open",
}
DECISIONS = {"continue", "nudge", "refuse", "stop"}


class Expect(NamedTuple):
    """What the contract says the replay of one trajectory decides."""

    disposition: str
    stop_reason: str | None
    stopped_at: int | None
    refused: frozenset[int] = frozenset()
    progress: Mapping[int, bool] = {}
    xfail: str | None = None


def _open(**kw: Any) -> Expect:
    return Expect("open", None, None, **kw)


def _stall(at: int, **kw: Any) -> Expect:
    return Expect("no_progress", "stall", at, **kw)


def _failure(at: int, **kw: Any) -> Expect:
    return Expect("no_progress", "repeated_failure", at, **kw)


def _identical(at: int, **kw: Any) -> Expect:
    return Expect("no_progress", "identical_responses", at, **kw)


def _completed(at: int, reason: str = "checks_passed", **kw: Any) -> Expect:
    return Expect("completed", reason, at, **kw)


EXPECTED: dict[str, Expect] = {
    # -- the examples of the format's own text --------------------------------------
    # Every example line, as written; the claim example names a condition, evidence
    # and a reason ("..." is not empty), so it ends the run as blocked.
    "contract_examples": Expect("blocked", "blocked_claim", 9),
    "contract_signal_user_stop": Expect("stopped", "user_stop", 4),
    "contract_signal_stop_signal": Expect("stopped", "stop_signal", 4),
    "contract_signal_deadline": Expect("budget_exhausted", "deadline", 4),
    # A header and no events is a valid trajectory that ended before any decision.
    "header_only": _open(),
    # -- semantically duplicate actions ---------------------------------------------
    # One failure reached by `pytest -q`, `python -m pytest -q`, `python3 -m pytest  -q`
    # and `.venv/bin/python -m pytest -q` (timings and tmp paths differ): its 4th
    # occurrence on one candidate (event 5) stops the run.
    "dup_pytest_spellings": _failure(5, progress={2: True, 3: False, 4: False}),
    "dup_pytest_spellings_threshold3": _failure(4),
    "repeated_failed_make": _failure(5),
    "same_read_spelled_differently": _stall(
        5, refused=frozenset({4}), progress={1: True, 2: False}
    ),
    "custom_tool_canonical_args": _stall(
        5, refused=frozenset({4}), progress={1: True, 2: False, 3: False}
    ),
    # -- allowed retries ------------------------------------------------------------
    # Fails, fails again the same way, then passes: a retry, not a loop.
    "flaky_retry_then_ok": _open(progress={3: False, 4: True}),
    # Twelve 429s are not the agent's loop; the fetch then succeeds and grounds.
    "rate_limit_429_many": _completed(14, "grounded_answer"),
    "infra_errors_mixed": _open(),
    # Event 4 repeats exactly the fetch that made no progress at events 2-3, at the
    # refuse rung: it is refused (its recorded 429 never happens) and so is event 5.
    "infra_does_not_reset_stall": _stall(5, refused=frozenset({4})),
    # Without the refuse rung, infrastructure errors are neither progress nor a step
    # without progress: the stall of events 2-3 continues at events 9-10.
    "infra_does_not_reset_stall_no_refusals": _stall(10),
    # "connection refused" is the agent's own failure.
    "connection_refused_is_agents": _failure(5, progress={3: False}),
    # A 429 body with an `ok` status is an ordinary (repeated) result.
    "rate_limit_body_with_ok_status": _stall(5, refused=frozenset({4})),
    # -- results that change without task progress -----------------------------------
    "changing_request_id_and_timestamp": _stall(
        6, refused=frozenset({5}), progress={2: True, 3: False}
    ),
    "changing_date_output": _stall(5, refused=frozenset({4})),
    # -- completed tasks with extra actions -----------------------------------------
    "completed_then_extra_actions": _completed(5),
    # -- distinct progress ----------------------------------------------------------
    "fetch_same_url_10": _stall(
        5, refused=frozenset({4}), progress={1: True, 2: False, 3: False, 4: False}
    ),
    "fetch_cycle_abc": _stall(7, progress={1: True, 2: True, 3: True, 4: False}),
    "fetch_new_urls": _open(progress=dict.fromkeys(range(1, 13), True)),
    "distinct_successful_commands": _open(progress=dict.fromkeys(range(1, 13), True)),
    # -- identical responses --------------------------------------------------------
    "identical_messages_default": _identical(4),
    "identical_near_miss_resets": _open(),
    "identical_near_miss_then_third": _identical(6),
    "identical_whitespace_only": _identical(4),
    "identical_empty_texts": _identical(4),
    "identical_threshold_zero": _open(),
    "identical_threshold_two": _identical(3),
    "identical_reset_by_user": _open(),
    # -- one failure on one candidate, side work in between --------------------------
    "same_failure_side_commands": _failure(
        7, progress={2: True, 3: False, 4: True, 5: False, 6: True}
    ),
    "verdict_same_failure_repeated": _failure(8),
    # -- returning to an earlier candidate, cycles ------------------------------------
    "edit_revert_cycle": _stall(8, progress={1: True, 2: True, 3: False, 5: False}),
    "write_revert_cycle": _stall(6, progress={1: True, 2: True, 3: False}),
    "cycle_period2": _stall(6),
    "cycle_period3": _stall(7),
    "cycle_period4": _stall(8),
    "cycle_period5": _stall(9),
    # -- parallel rounds --------------------------------------------------------------
    # Six rounds of the same three reads: rounds 2-5 are the four iterations without
    # progress, so the stop lands on round 5 (events 13-15), on its last event. The
    # reads of round 4 repeat round 3's exactly at the refuse rung: refused, and so
    # are round 5's before the stop.
    "parallel_rounds_counted_once": _stall(15, refused=frozenset(range(10, 15))),
    "parallel_round_any_progress": _open(),
    # Two spellings of one failing run per round: one occurrence per round.
    "parallel_failures_counted_once": _failure(8, refused=frozenset({7})),
    # -- a user event starts a fresh window -------------------------------------------
    "user_fresh_window": _open(),
    "user_fresh_window_control": _failure(4),
    "user_resets_seen_digests": _stall(10, progress={4: False, 6: True, 7: True, 8: False}),
    "user_keeps_sources": _completed(3, "grounded_answer"),
    # -- polls ------------------------------------------------------------------------
    "poll_ci_pending_then_success": _open(progress={17: True}),
    "poll_failing_same": _failure(5),
    # poll_limit 5: events 1-5 are the same outcome five times in a row, allowed;
    # events 6-9 are four ordinary repetitions.
    "poll_over_limit": _stall(9, refused=frozenset({8})),
    "poll_streak_reset_by_user": _open(),
    # -- legitimate work that must not stop -------------------------------------------
    "fix_verify_changing_failures": _completed(11, progress={2: True, 4: True, 6: False, 8: True}),
    "same_edit_many_files": _open(progress=dict.fromkeys(range(1, 15), True)),
    "paging_tool_identical_args": _open(progress=dict.fromkeys(range(1, 13), True)),
    "debugger_stepping": _open(progress={5: True, 8: False, 10: True, 12: True}),
    # -- answer tasks -----------------------------------------------------------------
    "answer_grounded": _completed(3, "grounded_answer"),
    "answer_ungrounded_not_exact_url": _open(),
    "answer_source_fetch_error": _open(),
    "answer_partial_with_fetch": Expect("partial", "partial_answer", 3),
    "answer_partial_without_fetch": Expect("blocked", "partial_answer_without_evidence", 3),
    "answer_failure_report_blockers": Expect("blocked", "failure_report", 2),
    "answer_failure_report_no_blockers": _open(),
    # -- build tasks ------------------------------------------------------------------
    "build_final_answer_is_checkpoint": _open(),
    "build_verdict_current": _completed(4),
    "build_stale_verdict": _open(),
    "build_stale_then_current": _completed(6),
    "build_unchanged_write_keeps_digest": _completed(6),
    "build_required_checks_all": _completed(8),
    "build_default_checks": _completed(5),
    "build_unlisted_check_ignored": _completed(4),
    "build_verdict_of_event_zero": _completed(3),
    # A write that timed out has an unknown effect: a verdict of the candidate before
    # it cannot be shown to judge the current one.
    "build_timeout_write_stale": _open(),
    # The judged candidate (after event 2) equals the current one again after the
    # write of event 4 restored the content.
    "build_revert_makes_evidence_current": _completed(5),
    # -- protected paths --------------------------------------------------------------
    "protected_write_refused": _completed(10, refused=frozenset({3, 4, 5, 9}), progress={3: False}),
    # -- claims -----------------------------------------------------------------------
    "claim_blocked_complete": Expect("blocked", "blocked_claim", 3),
    "claim_needs_input_complete": Expect("needs_input", "needs_input_claim", 2),
    "claim_incomplete_refused": Expect("blocked", "blocked_claim", 6, refused=frozenset({2, 3, 4})),
    # -- signals ----------------------------------------------------------------------
    "signal_deadline_stale_candidate": Expect("budget_exhausted", "deadline", 5),
    "signal_deadline_ungrounded_answer": Expect("budget_exhausted", "deadline", 2),
    "signal_stop_after_stall": Expect("stopped", "stop_signal", 5, refused=frozenset({4})),
    # -- thresholds -------------------------------------------------------------------
    "stall_threshold_zero": _open(),
    # -- cases that once disagreed with the contract ------------------------------------
    # The only change between runs is x-github-request-id (and the date): a request
    # id is a volatile field, so events 2-5 are four steps without progress.
    "changing_github_request_id": _stall(5, refused=frozenset({4})),
    # "lookup proxy.golang.org ...: no such host" is a DNS failure: an infrastructure
    # error, never the agent's loop; the network comes back at event 9.
    "go_dns_failure_is_infrastructure": _open(),
    # The suite's own summary "522 passed" reports no HTTP status: this is the
    # agent's failure, four times on one candidate.
    "large_suite_same_failure": _failure(4),
    # A test asserting `status_code == 429` fails; nothing was rate limited.
    "rate_limiter_test_failure_is_agents": _failure(5),
    # The rows printed at events 2, 4, 6, 8, 10 are distinct data (dates in a CSV);
    # they are not timestamps of the observation.
    "debugger_loop_date_values": _open(),
    # Events 7-9 make no progress, event 10 (the same `next` call) reaches a new line:
    # three steps without progress, then new data.
    "debugger_loop_repeat_then_new": _open(),
    # The write of event 3 puts back exactly the content read at event 1: no file's
    # content changed, so the candidate judged at event 2 is the current one.
    "read_then_identical_write": _completed(4),
    # -- additions since the first version of the contract ----------------------------
    # `changed: true` (a `sed -i`): a new candidate, so the failure of events 1-3 starts
    # counting again at event 5; without the mark, event 5 is its 4th occurrence.
    # Event 7 repeats exactly the run that failed at events 5-6 on this candidate, at
    # the refuse rung: it is refused (the ladder of docs/progress.md).
    "changed_shell_edit_restarts_failure_count": _open(
        refused=frozenset({7}), progress={4: True, 5: False}
    ),
    "changed_control_unmarked_shell_edit": _failure(5),
    # The same `sed -i` repeated: each is a new candidate, none is progress (the
    # outcome decides, and it repeats); events 3-6 stall, the exact repeat at the
    # refuse rung (event 5) refused.
    "changed_alone_is_not_progress": _stall(
        6, refused=frozenset({5}), progress={2: True, 3: False}
    ),
    # Evidence from before a `changed` action is stale; without the mark it is current.
    "changed_makes_evidence_stale": _open(),
    "changed_control_unmarked_evidence_current": _completed(3),
    # `candidate`: stated digests replace the replay's model. Returning to one seen
    # before is a cycle (events 3-6), evidence binds to the stated digest, and a
    # write whose stated digest is unchanged leaves the evidence current.
    "candidate_return_is_a_cycle": _stall(6, progress={1: True, 2: True, 3: False}),
    "candidate_verdict_current": _completed(3),
    "candidate_verdict_stale": _open(),
    "candidate_write_stated_unchanged": _completed(3, progress={2: False}),
    # `failure_window`: with a window of 10, failures at 1, 4, 7, 10 stop the run; at
    # 1, 5, 9, 13 the first has left the window by the fourth. The default window of
    # 20 lets occurrences at 1, 9, 17, 25 pass; a window of 0 counts them all.
    "failure_window_within": _failure(10),
    "failure_window_outside": _open(progress={13: False}),
    "failure_window_default_expires": _open(),
    "failure_window_zero_counts_all": _failure(25),
    # A failure with empty output is keyed with its command: five different searches
    # that find nothing are five dead ends; one search spelled four ways is one.
    "empty_output_distinct_searches": _open(progress={4: True, 5: True}),
    "empty_output_same_search_repeated": _failure(4),
}


def _files() -> list[Path]:
    return sorted(TRAJECTORIES.glob("*.jsonl"))


def _run_all(paths: list[Path], width: int) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run ``proctor replay PATH --json`` for every path, ``width`` at a time."""
    done: dict[str, subprocess.CompletedProcess[str]] = {}
    running: deque[tuple[Path, subprocess.Popen[str]]] = deque()

    def finish() -> None:
        path, proc = running.popleft()
        out, err = proc.communicate(timeout=60)
        done[path.stem] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    for path in paths:
        if len(running) >= width:
            finish()
        args = [sys.executable, "-m", "proctor", "replay", str(path), "--json"]
        running.append(
            (
                path,
                subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            )
        )
    while running:
        finish()
    return done


@pytest.fixture(scope="module")
def replays() -> dict[str, subprocess.CompletedProcess[str]]:
    return _run_all(_files(), width=2 * (os.cpu_count() or 1))


def _document(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


def _events_in(name: str) -> int:
    lines = (TRAJECTORIES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return len([line for line in lines if line.strip()]) - 1


def test_every_trajectory_has_an_expectation() -> None:
    names = {p.stem for p in _files()}
    assert names == set(EXPECTED)


def test_trajectories_are_one_json_object_per_line() -> None:
    for path in _files():
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        assert header["format"] == "proctor.trajectory"
        assert header["version"] == 1
        for line in lines[1:]:
            assert isinstance(json.loads(line), dict), path.name


def _cases() -> list[Any]:
    out = []
    for name, expect in EXPECTED.items():
        marks = [pytest.mark.xfail(strict=True, reason=expect.xfail)] if expect.xfail else []
        out.append(pytest.param(name, expect, id=name, marks=marks))
    return out


@pytest.mark.parametrize(("name", "expect"), _cases())
def test_replay_decides_as_the_contract_says(
    replays: dict[str, subprocess.CompletedProcess[str]], name: str, expect: Expect
) -> None:
    doc = _document(replays[name])
    assert {"disposition", "stop_reason", "stopped_at", "events", "policy_version", "steps"} <= set(
        doc
    )
    assert doc["events"] == _events_in(name)
    assert isinstance(doc["policy_version"], str)
    assert doc["policy_version"]

    # The decision itself.
    assert (doc["disposition"], doc["stop_reason"], doc["stopped_at"]) == (
        expect.disposition,
        expect.stop_reason,
        expect.stopped_at,
    )

    # One step per processed event, in order; none after the stop.
    steps = doc["steps"]
    last = doc["stopped_at"] if doc["stopped_at"] is not None else doc["events"]
    assert [s["index"] for s in steps] == list(range(1, last + 1))
    for step in steps:
        assert set(step) >= {"index", "decision", "progress"}
        assert step["decision"] in DECISIONS
        assert isinstance(step["progress"], bool)

    # The stop is the decision of the event it happened at, and of no other.
    stops = [s["index"] for s in steps if s["decision"] == "stop"]
    assert stops == ([expect.stopped_at] if expect.stopped_at is not None else [])

    refused = {s["index"] for s in steps if s["decision"] == "refuse"}
    assert refused == set(expect.refused)

    by_index = {s["index"]: s for s in steps}
    for index, progress in expect.progress.items():
        assert by_index[index]["progress"] is progress, f"event {index}"


def test_dispositions_and_decisions_are_from_the_contract(
    replays: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    for name in EXPECTED:
        doc = _document(replays[name])
        assert doc["disposition"] in DISPOSITIONS, name
        assert (doc["disposition"] == "open") == (doc["stopped_at"] is None), name
        assert (doc["stop_reason"] is None) == (doc["stopped_at"] is None), name


def test_policy_version_follows_the_policy(
    replays: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    def version(name: str) -> str:
        return str(_document(replays[name])["policy_version"])

    # Same (default) policy, different trajectories: one version.
    assert version("fetch_same_url_10") == version("answer_grounded")
    # The contract example's header states the defaults explicitly.
    assert version("contract_examples") == version("answer_grounded")
    # Other settings, other versions.
    assert version("stall_threshold_zero") != version("answer_grounded")
    assert version("poll_over_limit") != version("identical_threshold_two")


def test_replay_is_deterministic(replays: dict[str, subprocess.CompletedProcess[str]]) -> None:
    name = "parallel_rounds_counted_once"
    again = _run_all([TRAJECTORIES / f"{name}.jsonl"], width=1)[name]
    assert _document(again) == _document(replays[name])
