"""The stop boundary: completion needs evidence for the candidate as it stands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proctor import (
    Amendment,
    Claim,
    CommandCheck,
    Completion,
    Disposition,
    FileCheck,
    FunctionActor,
    JudgeCheck,
    JudgeFindings,
    Message,
    MessageKind,
    Observation,
    Policy,
    Proposal,
    PythonCheck,
    ScriptedActor,
    Task,
    ToolCall,
    amend,
    run,
)
from proctor.runtime import Judge, TaskFacts, open_journal
from proctor.runtime._progress.judge import Verdict
from proctor.runtime._tools.sandbox import overlay_available
from proctor.verifiers import Evidence

PY = sys.executable
PYTEST = (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")


def _project(root: Path, tests: str | None = None) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    (root / "tests" / "test_calc.py").write_text(
        tests
        or (
            "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
            "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
            "def test_sub():\n    assert sub(5, 3) == 2\n"
        )
    )
    return root


def _task(root: Path, **kw: object) -> Task:
    values: dict[str, object] = {
        "goal": "make the tests pass",
        "workspace": root,
        "checks": (CommandCheck("tests", PYTEST),),
        "protected": ("tests/**",),
    }
    values.update(kw)
    return Task(**values)  # type: ignore[arg-type]


FIX = ToolCall(
    "edit_file", {"path": "calc.py", "old": "return a - b\n\n\ndef", "new": "return a + b\n\n\ndef"}
)


async def test_a_passing_candidate_completes_and_polishing_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    polish = [
        ToolCall("write_file", {"path": "calc.py", "content": f"# polish {i}\n"}) for i in range(5)
    ]
    actor = ScriptedActor([FIX, Completion("done"), *polish])
    result = await run(_task(root), actor, tmp_path / "j")
    assert result.disposition is Disposition.COMPLETED
    assert "return a + b" in (root / "calc.py").read_text()
    async with open_journal(tmp_path / "j") as j:
        steps = await j.steps(result.run_id)
    after = steps[[s["decision"] for s in steps].index("stop") + 1 :]
    assert len(after) == 5
    assert all(s["decision"] == "refuse" and "fence" in str(s["reason"]) for s in after)


async def test_evidence_for_a_candidate_that_changed_during_verification_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proctor.runtime._control import controller

    # Verified from a copy: the copy holds still, the workspace moves on.
    monkeypatch.setattr(controller, "verifiable_in_place", lambda *args: False)
    root = _project(tmp_path / "p")
    touched: list[bool] = []

    def meddle(snapshot: Path) -> bool:
        # Something outside the controller changes the workspace while the checks run.
        if not touched:
            (root / "notes.txt").write_text("changed behind the controller's back\n")
            touched.append(True)
        return True

    task = _task(root, checks=(CommandCheck("tests", PYTEST), PythonCheck("meddle", meddle)))
    result = await run(task, ScriptedActor([FIX, Completion()]), tmp_path / "j")
    first = next(e for e in result.evidence if e.check == "tests")
    assert first.passed
    # The candidate it judged is not the one that stands: it completed nothing...
    assert first.candidate_digest != result.candidate.digest
    # ... until the wrap-up verification judged the candidate as it stands.
    assert result.disposition is Disposition.COMPLETED
    assert result.evidence[-1].candidate_digest == result.candidate.digest


async def test_a_candidate_changed_while_judged_in_place_is_judged_again_from_a_copy(
    tmp_path: Path,
) -> None:
    if overlay_available() is not None:
        pytest.skip(f"no overlay here: {overlay_available()}")
    root = _project(tmp_path / "p")
    looked: list[Path] = []

    def meddle(snapshot: Path) -> bool:
        # Something outside the controller changes the workspace while the checks run.
        if not looked:
            (root / "notes.txt").write_text("changed behind the controller's back\n")
        looked.append(snapshot)
        return True

    task = _task(root, checks=(CommandCheck("tests", PYTEST), PythonCheck("meddle", meddle)))
    result = await run(task, ScriptedActor([FIX, Completion()]), tmp_path / "j")
    # In place first (the workspace itself), then a copy: no evidence of the moved tree is kept.
    assert looked[0].resolve() == root.resolve()
    assert looked[1].resolve() != root.resolve()
    assert result.disposition is Disposition.COMPLETED
    assert {e.candidate_digest for e in result.evidence} == {result.candidate.digest}


async def test_alternating_regressions_stop_without_completing(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    (root / "calc.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
    )
    # Each edit fixes one function and breaks the other.
    fix_sub = ToolCall(
        "write_file",
        {
            "path": "calc.py",
            "content": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
        },
    )
    fix_add = ToolCall(
        "write_file",
        {
            "path": "calc.py",
            "content": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n",
        },
    )
    script: list[Proposal] = []
    for _ in range(6):
        script += [fix_sub, Completion(), fix_add, Completion()]
    result = await run(_task(root), ScriptedActor(script), tmp_path / "j")
    assert result.disposition is Disposition.NO_PROGRESS
    assert not any(e.passed for e in result.evidence if e.check == "tests")


async def test_an_unavailable_prerequisite_is_blocked_only_with_a_proper_claim(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p")
    probe = ToolCall("run_command", {"cmd": "curl --version || echo 'no network tools'"})
    vague = Claim("blocked", condition="it does not work")
    proper = Claim(
        "blocked",
        condition="the package index is unreachable, so the dependency cannot be installed",
        evidence=("pip install failed: Temporary failure in name resolution",),
        reason="no permitted tool reaches the network; an operator must mirror the package",
    )
    actor = ScriptedActor([probe, vague, proper])
    result = await run(_task(root, policy=Policy(stall_threshold=0)), actor, tmp_path / "j")
    assert result.disposition is Disposition.BLOCKED
    assert result.stop_reason is not None
    assert result.stop_reason.code == "blocked_claim"
    assert result.handoff.owner == "operator"
    async with open_journal(tmp_path / "j") as j:
        steps = await j.steps(result.run_id)
    claims = [s for s in steps if s["kind"] == "claim"]
    assert [c["decision"] for c in claims] == ["refuse", "stop"]
    assert "evidence" in str(claims[0]["reason"])


async def test_a_claim_before_anything_was_tried_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    proper = Claim("blocked", "cannot fix", ("none",), "no idea")
    result = await run(_task(root), ScriptedActor([proper]), tmp_path / "j")
    assert result.disposition is not Disposition.BLOCKED


async def test_tests_changed_by_a_command_are_rejected_by_the_scope_check(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    cheat = ToolCall(
        "run_command",
        {"cmd": "printf 'def test_add():\\n    pass\\n' > tests/test_calc.py"},
    )
    result = await run(_task(root), ScriptedActor([cheat, Completion()]), tmp_path / "j")
    assert result.disposition is not Disposition.COMPLETED
    scope = [e for e in result.evidence if e.check == "scope"]
    assert scope
    assert not scope[0].passed
    assert "protected: tests/test_calc.py" in scope[0].excerpt
    # The rewritten tests never ran: the check ran the baseline's, which still fail.
    tests = next(e for e in result.evidence if e.check == "tests")
    assert not tests.passed
    assert "tests/test_calc.py::test_add" in tests.failing_tests


async def test_prose_claims_of_success_change_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    prose = [
        Message(MessageKind.FINAL_ANSWER, "All tests pass now. The task is complete."),
        Message(MessageKind.CHECKPOINT, "Verified: everything is green."),
    ]
    result = await run(_task(root), ScriptedActor(prose), tmp_path / "j")
    assert result.disposition is not Disposition.COMPLETED
    assert not any(e.passed for e in result.evidence if e.check == "tests")


async def test_an_amended_contract_makes_earlier_evidence_stale(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    journal = tmp_path / "j"
    script: list[Proposal] = [Completion("first try"), Completion("again, under the new contract")]

    async def propose(observation: Observation) -> Proposal | None:
        if len(script) == 1:
            # An operator, elsewhere, replaces the failing check by a file check.
            async with open_journal(journal) as j:
                runs = await j.list_runs(1)
            await amend(
                journal,
                runs[0].run_id,
                Amendment(
                    who="ops",
                    why="the tests are obsolete; the file is what matters",
                    drop_checks=("tests",),
                    add_checks=(("exists", "test -f calc.py"),),
                ),
            )
        return script.pop(0) if script else None

    result = await run(_task(root), FunctionActor(propose), journal)
    assert result.disposition is Disposition.COMPLETED
    versions = {e.contract_version for e in result.evidence}
    assert len(versions) == 2
    async with open_journal(journal) as j:
        steps = await j.steps(result.run_id)
        task = await j.get_task(result.task_id)
    amended = [s for s in steps if s["kind"] == "amend"]
    assert len(amended) == 1
    assert "ops" in str(amended[0]["reason"])
    assert task["contract_version"] == result.evidence[-1].contract_version


async def test_optional_checks_and_judge_suggestions_go_to_the_handoff(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def reviewer(snapshot: Path, evidence: object) -> JudgeFindings:
        return JudgeFindings("suggest", ("name the magic numbers",))

    checks = (
        CommandCheck("tests", PYTEST),
        CommandCheck("style", "false", required=False),
        FileCheck("readme", ("README*",), required=False),
        JudgeCheck("review", reviewer),
    )
    result = await run(
        _task(root, checks=checks), ScriptedActor([FIX, Completion()]), tmp_path / "j"
    )
    assert result.disposition is Disposition.COMPLETED
    assert "suggestion: style fails" in result.handoff.open_findings
    assert "suggestion: readme fails" in result.handoff.open_findings
    assert "suggestion: name the magic numbers" in result.handoff.open_findings


async def test_a_judge_can_reject_but_never_complete_alone(tmp_path: Path) -> None:
    async def approve(snapshot: Path, evidence: object) -> JudgeFindings:
        return JudgeFindings("accept")

    async def reject(snapshot: Path, evidence: object) -> JudgeFindings:
        return JudgeFindings("reject", ("the fix hides the bug",))

    with pytest.raises(ValueError, match="not a judge"):
        Task(goal="g", workspace=tmp_path, checks=(JudgeCheck("review", approve),))
    root = _project(tmp_path / "p")
    checks = (CommandCheck("tests", PYTEST), JudgeCheck("review", reject))
    result = await run(
        _task(root, checks=checks), ScriptedActor([FIX, Completion()]), tmp_path / "j"
    )
    assert result.disposition is not Disposition.COMPLETED
    assert "review fails" in result.handoff.open_findings


def test_evidence_under_another_contract_version_completes_nothing() -> None:
    judge = Judge(TaskFacts(checks=("tests",)), Policy(), "d1", contract_version="v2")
    stale = judge.verdict(Verdict("tests", True, "d1", "", contract="v1"))
    assert stale.disposition is None
    assert "stale" in stale.reason
    fresh = judge.verdict(Verdict("tests", True, "d1", "", contract="v2"))
    assert fresh.disposition is Disposition.COMPLETED


def test_evidence_for_an_earlier_digest_completes_nothing() -> None:
    judge = Judge(TaskFacts(checks=("tests",)), Policy(), "d2")
    assert judge.verdict(Verdict("tests", True, "d1")).disposition is None
    assert judge.verdict(Verdict("tests", True, "d2")).disposition is Disposition.COMPLETED


def test_an_unchanged_failure_after_a_repair_is_no_progress() -> None:
    judge = Judge(TaskFacts(checks=("tests",)), Policy(), "d1")
    assert judge.verdict(Verdict("tests", False, "d1", "FAILED test_a - assert 1 == 2")).progress
    judge.observe_candidate("d2")
    again = judge.verdict(Verdict("tests", False, "d2", "FAILED test_a - assert 1 == 2"))
    assert not again.progress
    judge.observe_candidate("d3")
    changed = judge.verdict(Verdict("tests", False, "d3", "FAILED test_b - assert 3 == 4"))
    assert changed.progress


def test_evidence_records_round_trip() -> None:
    from proctor._wire import converter

    ev = Evidence("d", "v", "tests", True, ("pytest",), 0, "x", "ok", 1.0)
    assert converter.structure(converter.unstructure(ev), Evidence) == ev
