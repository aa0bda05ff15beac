# ruff: noqa: E501 - the JUnit sample keeps one test case a line, as pytest writes it
"""The harness of a check, its per-test results, and the baseline they are judged against."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from proctor.runtime._tools import sandbox as sb
from proctor.verifiers import _checks
from proctor.verifiers import _harness as h
from proctor.verifiers._candidate import matches
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._more_checks import CheckContext

PY = sys.executable

# ---------------------------------------------------------------- (a)


def test_patterns_python_m_pytest(tmp_path: Path) -> None:
    pats = h.harness_patterns(
        [PY, "-m", "pytest", "tests"], workspace=tmp_path, cwd=tmp_path, path="/usr/bin"
    )
    for f in [
        "conftest.py",
        "tests/sub/conftest.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "lib/usercustomize.py",
        ".venv/lib/python3.11/site-packages/evil.pth",
        "pytest.py",
        "pytest/__init__.py",
        "_pytest/main.py",
        "py.py",
        "pluggy.py",
        "os.py",
        "json/__init__.py",
    ]:
        assert matches(f, pats), f
    for f in ["src/app.py", "tests/test_app.py", "README.md", "sub/os.py"]:
        assert not matches(f, pats), f


def test_patterns_console_script_in_workspace_venv(tmp_path: Path) -> None:
    (tmp_path / ".venv/bin").mkdir(parents=True)
    pats = h.harness_patterns(
        ["pytest", "-q"], workspace=tmp_path, cwd=tmp_path, path=f"{tmp_path}/.venv/bin:/usr/bin"
    )
    assert matches(".venv/bin/pytest", pats)
    assert matches(".venv/lib/python3.11/site-packages/_pytest/main.py", pats)
    assert matches("pytest.py", pats)
    assert matches("_pytest/x.py", pats)
    assert not matches("src/app.py", pats)


def test_patterns_relative_script_and_options(tmp_path: Path) -> None:
    pats = h.harness_patterns(["./run_tests.sh"], workspace=tmp_path, cwd=tmp_path)
    assert matches("run_tests.sh", pats)
    pats = h.harness_patterns(
        [PY, "-m", "pytest", "-c", "ci/pytest.cfg", "-p", "myplug"],
        workspace=tmp_path,
        cwd=tmp_path,
    )
    assert matches("ci/pytest.cfg", pats)
    assert matches("src/myplug.py", pats)
    pats = h.harness_patterns([PY, "tools/check.py"], workspace=tmp_path, cwd=tmp_path)
    assert matches("tools/check.py", pats)
    assert matches("tools/json.py", pats)


# ---------------------------------------------------------------- (b)

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="6">
<testcase classname="tests.test_mod" name="test_ok" file="tests/test_mod.py" line="1" time="0.001"/>
<testcase classname="tests.test_mod.TestK" name="test_p[1-a]" file="tests/test_mod.py" line="5"/>
<testcase classname="tests.test_mod.TestK.TestInner" name="test_fail" file="tests/test_mod.py"><failure message="x">tb</failure></testcase>
<testcase classname="tests.test_mod" name="test_skip" file="tests/test_mod.py"><skipped message="s"/></testcase>
<testcase classname="tests.test_mod" name="test_teardown" file="tests/test_mod.py"><error message="teardown"/></testcase>
<testcase classname="" name="tests.test_broken" time="0"><error message="collection failure">SyntaxError</error></testcase>
</testsuite></testsuites>"""


def test_parse_junit_ids_and_outcomes() -> None:
    out = h.parse_junit(JUNIT)
    assert out == {
        "tests/test_mod.py::test_ok": "passed",
        "tests/test_mod.py::TestK::test_p[1-a]": "passed",
        "tests/test_mod.py::TestK::TestInner::test_fail": "failed",
        "tests/test_mod.py::test_skip": "skipped",
        "tests/test_mod.py::test_teardown": "error",
        "tests/test_broken.py": "error",
    }


def test_parse_junit_xunit2_uses_root(tmp_path: Path) -> None:
    (tmp_path / "pkg/tests").mkdir(parents=True)
    (tmp_path / "pkg/tests/test_x.py").write_text("")
    xml = b'<testsuite><testcase classname="pkg.tests.test_x.TestA" name="test_b"/></testsuite>'
    assert h.parse_junit(xml, root=tmp_path) == {"pkg/tests/test_x.py::TestA::test_b": "passed"}
    assert h.parse_junit(xml) == {"pkg/tests/test_x.py::TestA::test_b": "passed"}  # heuristic


@pytest.mark.parametrize(
    ("bad", "msg"),
    [
        (b"", "empty"),
        (b"<testsuites><testsuite>", "malformed"),
        (b"<html/>", "root element"),
        (b"<testsuite><testcase classname='a'/></testsuite>", "without a name"),
    ],
)
def test_parse_junit_malformed(bad: bytes, msg: str) -> None:
    with pytest.raises(h.JUnitError, match=msg):
        h.parse_junit(bad)


def test_parse_junit_missing_file(tmp_path: Path) -> None:
    with pytest.raises(h.JUnitError, match="no JUnit XML"):
        h.parse_junit(tmp_path / "nope.xml")


@pytest.mark.skipif(sb.sandbox_available() is not None, reason="no bwrap")
async def test_a_pytest_check_reads_per_test_results_in_the_sandbox(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests/test_a.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 0\n"
        "@pytest.mark.skip\ndef test_sk(): pass\n"
        "class TestC:\n    @pytest.mark.parametrize('x', [1, 2])\n    def test_p(self, x): assert x == 1\n"
    )
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    check = CommandCheck("tests", [PY, "-m", "pytest", "-q"])
    evidence = await check.run_check(ws, "d", "v", CheckContext(sandbox=spec))
    assert evidence.exit_code == 1
    assert dict(evidence.tests) == {
        "tests/test_a.py::test_ok": "passed",
        "tests/test_a.py::test_bad": "failed",
        "tests/test_a.py::test_sk": "skipped",
        "tests/test_a.py::TestC::test_p[1]": "passed",
        "tests/test_a.py::TestC::test_p[2]": "failed",
    }
    assert evidence.failing_tests == (
        "tests/test_a.py::TestC::test_p[2]",
        "tests/test_a.py::test_bad",
    )
    assert evidence.env_digest
    assert not list(ws.rglob("*.xml"))


@pytest.mark.skipif(sb.sandbox_available() is not None, reason="no bwrap")
async def test_a_pytest_that_crashes_fails_with_a_clear_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conftest.py").write_text("import os\nos._exit(0)\n")
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    check = CommandCheck("tests", [PY, "-m", "pytest"])
    evidence = await check.run_check(ws, "d", "v", CheckContext(sandbox=spec))
    assert evidence.exit_code == 0
    assert not evidence.passed
    assert "results_unfinished" in evidence.findings
    assert "session did not end" in evidence.excerpt


@pytest.mark.skipif(sb.sandbox_available() is not None, reason="no bwrap")
async def test_a_pytest_check_that_ran_nothing_fails(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "test_a.py").write_text("import pytest\n@pytest.mark.skip\ndef test_sk(): pass\n")
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    check = CommandCheck("tests", [PY, "-m", "pytest", "-q"])
    evidence = await check.run_check(ws, "d", "v", CheckContext(sandbox=spec))
    assert evidence.exit_code == 0
    assert not evidence.passed
    assert "no test ran" in evidence.excerpt


@pytest.mark.skipif(sb.sandbox_available() is not None, reason="no bwrap")
async def test_a_deselected_required_test_fails_against_the_baseline(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "test_a.py").write_text("def test_one(): pass\ndef test_two(): pass\n")
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    check = CommandCheck("tests", [PY, "-m", "pytest", "-q", "-k", "one"])
    baseline = {"tests": {"test_a.py::test_one": "passed", "test_a.py::test_two": "failed"}}
    evidence = await check.run_check(
        ws, "d", "v", CheckContext(sandbox=spec, baseline_tests=baseline)
    )
    assert evidence.exit_code == 0
    assert not evidence.passed
    assert "missing: test_a.py::test_two" in evidence.excerpt


# ---------------------------------------------------------------- (c)

BASE = {"t::a": "passed", "t::b": "failed", "t::c": "skipped", "t::d": "error"}


def test_judge_ok() -> None:
    cand = {
        "t::a": "passed",
        "t::b": "passed",
        "t::c": "skipped",
        "t::d": "passed",
        "t::new": "failed",
    }
    ok, reason, f2p, p2p = h.judge_against_baseline(BASE, cand, {"t::e"} - {"t::e"})
    assert ok, reason
    assert f2p == ["t::b", "t::d"]
    assert p2p == ["t::a"]


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"t::a": "failed"}, "failed"),
        ({"t::b": "skipped"}, "skipped"),
        ({"t::d": "error"}, "error"),
    ],
)
def test_judge_fails(change: dict[str, str], word: str) -> None:
    cand = {"t::a": "passed", "t::b": "passed", "t::d": "passed", **change}
    ok, reason, _, _ = h.judge_against_baseline(BASE, cand)
    assert not ok
    assert word in reason


def test_judge_missing_and_must_pass() -> None:
    ok, reason, f2p, _ = h.judge_against_baseline(BASE, {"t::a": "passed", "t::b": "passed"})
    assert not ok
    assert "missing" in reason
    assert "t::d" in reason
    cand = {"t::a": "passed", "t::b": "passed", "t::d": "passed"}
    ok, reason, f2p, _ = h.judge_against_baseline(BASE, cand, {"t::new"})
    assert not ok
    assert "t::new" in reason
    assert "t::new" in f2p
    ok, _, _, _ = h.judge_against_baseline(BASE, {**cand, "t::new": "passed"}, {"t::new"})
    assert ok


def test_judge_none_ran() -> None:
    assert not h.judge_against_baseline({}, {})[0]
    assert not h.judge_against_baseline({}, {"t::x": "skipped"})[0]
    assert "no tests ran" in h.judge_against_baseline({}, {})[1]


async def test_a_check_that_fails_before_its_command_starts_leaves_no_results_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The per-test results directory holds the key the plugin signs with: it is
    # removed whatever ends the check, a launch that fails on the host included.
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("no cgroup could be made")

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(_checks, "launch", refuse)
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    check = CommandCheck("tests", [PY, "-m", "pytest", "-q"])
    with pytest.raises(OSError, match="no cgroup"):
        await check.run_check(ws, "d", "v", CheckContext(sandbox=spec))
    assert list(temp.iterdir()) == []
