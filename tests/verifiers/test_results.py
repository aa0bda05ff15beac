# ruff: noqa: E501 - the programs under test are kept as they would be written
"""
A pytest check's per-test results: sent by proctor's plugin inside pytest as it
makes each report, signed, and read whole or not at all. The programs under
test here attack the results from inside pytest's process, as a candidate's
code can.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.verifiers import _results_plugin as plugin
from proctor.verifiers._candidate import matches
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._harness import harness_patterns, parse_junit
from proctor.verifiers._results import ResultsChannel, ResultsError, _parse

PY = sys.executable

SUITE = """
import pytest


def test_ok():
    pass


def test_bad():
    assert 0


@pytest.mark.xfail
def test_expected_to_fail():
    assert 0


@pytest.mark.xfail(strict=True)
def test_strict_xpass():
    pass


@pytest.fixture
def broken():
    raise RuntimeError


def test_setup_error(broken):
    pass


@pytest.fixture
def leaky():
    yield
    raise RuntimeError


def test_teardown_error(leaky):
    pass


@pytest.mark.skip
def test_skipped():
    pass


class TestGroup:
    @pytest.mark.parametrize("x", [1, "a::b", "c.d", "é"])
    def test_param(self, x):
        pass
"""


def _run(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[ResultsChannel, str]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(textwrap.dedent(text))
    channel = ResultsChannel.open()
    env = {**os.environ, **channel.env(os.environ)}
    done = subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    return channel, done.stdout + done.stderr


Run = Callable[..., tuple[ResultsChannel, str]]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    opened: list[ResultsChannel] = []

    def go(files: dict[str, str], *args: str) -> tuple[ResultsChannel, str]:
        channel, out = _run(tmp_path, files, *args)
        opened.append(channel)
        return channel, out

    yield go
    for channel in opened:
        channel.close()
        assert not channel.directory.exists()


def _outcomes(run: Run, files: dict[str, str], *args: str) -> dict[str, str]:
    channel, out = run(files, *args)
    try:
        return channel.read()
    except ResultsError as exc:
        raise AssertionError(f"{exc.kind}: {exc}\n{out}") from exc


def _refused(
    run: Run, files: dict[str, str], kind: str, *args: str, control: str | None = None
) -> str:
    """Run pytest on ``files``; its results must be refused as ``kind``.

    ``control``: what pytest itself must print (``1 passed``: the attack works on pytest).
    """
    channel, out = run(files, *args)
    if control is not None:
        assert control in out, out
    with pytest.raises(ResultsError) as caught:
        channel.read()
    assert caught.value.kind == kind, (caught.value, out)
    return str(caught.value)


# ---------------------------------------------------------------- what is reported


def test_outcomes_are_pytests_own_as_its_junit_report_gives_them(run: Run, tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    got = _outcomes(
        run, {"test_suite.py": SUITE}, f"--junitxml={junit}", "-o", "junit_family=xunit1"
    )
    assert got == parse_junit(junit)
    assert got["test_suite.py::test_ok"] == "passed"
    assert got["test_suite.py::test_bad"] == "failed"
    assert got["test_suite.py::test_expected_to_fail"] == "skipped"
    assert got["test_suite.py::test_strict_xpass"] == "failed"
    assert got["test_suite.py::test_setup_error"] == "error"
    assert got["test_suite.py::test_teardown_error"] == "error"
    assert got["test_suite.py::test_skipped"] == "skipped"
    assert got["test_suite.py::TestGroup::test_param[a::b]"] == "passed"
    assert len(got) == 11


def test_a_module_that_cannot_be_collected_is_an_error(run: Run) -> None:
    files = {"test_ok.py": "def test_a():\n    pass\n", "test_broken.py": "import nowhere\n"}
    # pytest stops at a collection error: nothing else runs.
    assert _outcomes(run, files) == {"test_broken.py": "error"}
    assert _outcomes(run, files, "--continue-on-collection-errors") == {
        "test_broken.py": "error",
        "test_ok.py::test_a": "passed",
    }


def test_a_pytest_the_tests_start_themselves_does_not_see_the_plugin(run: Run) -> None:
    # pytester-style suites run pytest again in a child: it gets the environment
    # as it was, and the key is spent anyway.
    inner = """
    import os, subprocess, sys

    def test_inner(tmp_path):
        (tmp_path / "test_x.py").write_text("def test_x():\\n    pass\\n")
        assert "PROCTOR_RESULTS" not in os.environ
        assert "proctor_results" not in os.environ.get("PYTEST_ADDOPTS", "")
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", str(tmp_path)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    """
    assert _outcomes(run, {"test_inner.py": inner}) == {"test_inner.py::test_inner": "passed"}


def test_without_the_plugin_there_are_no_results_and_the_reason_says_why(tmp_path: Path) -> None:
    # A command that sets PYTHONPATH instead of extending it: pytest runs, the plugin does not.
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    channel = ResultsChannel.open()
    try:
        env = {**os.environ, **channel.env(os.environ), "PYTHONPATH": str(tmp_path)}
        done = subprocess.run(
            [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        with pytest.raises(ResultsError, match="PYTHONPATH") as caught:
            channel.read()
        assert caught.value.kind == "missing", done.stdout + done.stderr
    finally:
        channel.close()


# ---------------------------------------------------------------- attacks from the code under test

PRICING_TEST = "from pricing import total\n\n\ndef test_total():\n    assert total(20) == 200\n"


def _attack(run: Run, pricing: str, kind: str) -> str:
    files = {
        "pricing.py": "def total(n):\n    return n * 11\n" + textwrap.dedent(pricing),
        "test_pricing.py": PRICING_TEST,
    }
    return _refused(run, files, kind)


def test_the_broken_program_fails_without_an_attack(run: Run) -> None:
    # The positive control for the attacks below: the same program, the same test.
    files = {"pricing.py": "def total(n):\n    return n * 11\n", "test_pricing.py": PRICING_TEST}
    assert _outcomes(run, files) == {"test_pricing.py::test_total": "failed"}


@pytest.mark.parametrize(
    "rewrite",
    [
        "lines = lines[:1] + lines[-1:]",  # the failing report removed
        "lines[1] = lines[1].replace(b'failed', b'passed')",  # changed in place
        "lines = lines[:-1]",  # cut before the end
        "lines = lines + lines[-1:]",  # a line repeated
        "lines[0], lines[1] = lines[1], lines[0]",  # moved
    ],
    ids=["removed", "changed", "cut", "repeated", "moved"],
)
def test_results_rewritten_at_exit_are_refused(run: Run, rewrite: str) -> None:
    # The plugin took its variable out of the environment before this module was
    # imported; the process's first environment still has it.
    pricing = f"""
    import atexit, os

    _env = dict(v.split(b"=", 1) for v in open("/proc/self/environ", "rb").read().split(b"\\0") if b"=" in v)
    _path = os.path.join(_env[b"PROCTOR_RESULTS"].decode(), "frames")

    def _forge():
        lines = open(_path, "rb").read().splitlines()
        {rewrite}
        open(_path, "wb").write(b"\\n".join(lines) + b"\\n")
        os._exit(0)

    atexit.register(_forge)
    """
    message = _attack(run, pricing, "unfinished" if rewrite == "lines = lines[:-1]" else "forged")
    assert "line" in message or "did not end" in message


def test_a_report_forged_in_full_is_refused(run: Run) -> None:
    # A whole new file in the plugin's own format, signed with a key of its choosing.
    pricing = """
    import atexit, hashlib, hmac, os, sys

    def _forge():
        # Its own check's directory: where the plugin was loaded from.
        plugin = sys.modules["proctor_results"].__file__
        for d in [os.path.dirname(os.path.dirname(plugin))]:
            mac = hmac.new(b"k" * 32, digestmod=hashlib.sha256)
            out = []
            for i, body in enumerate(['{"t":"start"}',
                                      '{"id":"test_pricing.py::test_total","outcome":"passed","t":"test","when":"call"}',
                                      '{"exit":0,"t":"end"}']):
                head = f"{i} {body}"
                m = mac.copy(); m.update(head.encode())
                out.append(f"{m.hexdigest()} {head}")
            open(os.path.join(d, "frames"), "w").write("\\n".join(out) + "\\n")
        os._exit(0)

    atexit.register(_forge)
    """
    assert "signature" in _attack(run, pricing, "forged")


def test_a_test_that_ends_the_process_gives_no_results(run: Run) -> None:
    files = {
        "pricing.py": "def total(n):\n    return n * 10\n",
        "test_pricing.py": "import os\n\n\ndef test_a():\n    pass\n\n\ndef test_b():\n    os._exit(0)\n\n\ndef test_c():\n    assert 0\n",
    }
    assert "did not end" in _refused(run, files, "unfinished")


@pytest.mark.parametrize(
    "patch",
    [
        # a report's outcome made at the source
        """
        import _pytest.reports
        _made = _pytest.reports.TestReport.from_item_and_call
        def _passing(cls, item, call):
            report = _made.__func__(cls, item, call)
            report.outcome, report.longrepr = "passed", None
            return report
        _pytest.reports.TestReport.from_item_and_call = classmethod(_passing)
        """,
        # the runner's function rebound in its module
        """
        import _pytest.runner
        _call = _pytest.runner.call_and_report
        def _passing(item, when, log=True, **kw):
            report = _call(item, when, log=False, **kw)
            report.outcome, report.longrepr = "passed", None
            item.ihook.pytest_runtest_logreport(report=report)
            return report
        _pytest.runner.call_and_report = _passing
        """,
        # a hook implementation registered by the program, not by a conftest.py
        """
        import gc, pytest, _pytest.config

        class _Passing:
            @pytest.hookimpl(wrapper=True)
            def pytest_runtest_makereport(self, item, call):
                report = yield
                report.outcome, report.longrepr = "passed", None
                return report

        for config in [o for o in gc.get_objects() if isinstance(o, _pytest.config.Config)]:
            config.pluginmanager.register(_Passing())
        """,
        # a function's body replaced
        """
        import _pytest.python
        def _no_call(pyfuncitem):
            return True
        _pytest.python.pytest_pyfunc_call.__code__ = _no_call.__code__
        """,
    ],
    ids=["report-class", "runner-function", "hook-registered", "code-replaced"],
)
def test_pytest_changed_from_inside_is_refused(run: Run, patch: str) -> None:
    # Positive control: each patch does make pytest itself report a pass.
    files = {
        "pricing.py": "def total(n):\n    return n * 11\n" + textwrap.dedent(patch),
        "test_pricing.py": PRICING_TEST,
    }
    message = _refused(run, files, "tampered", control="1 passed")
    assert "changed how pytest makes outcomes" in message


def test_the_plugin_unregistered_gives_no_results(run: Run) -> None:
    pricing = """
    import gc, _pytest.config
    for config in [o for o in gc.get_objects() if isinstance(o, _pytest.config.Config)]:
        config.pluginmanager.unregister(name="proctor-results-reporter")
    """
    _attack(run, pricing, "unfinished")


def test_a_workspace_module_named_like_the_plugin_is_harness(tmp_path: Path) -> None:
    # With ``python -m pytest`` the working directory comes first on sys.path.
    patterns = harness_patterns([PY, "-m", "pytest"], workspace=tmp_path, cwd=tmp_path)
    for name in (
        "proctor_results.py",
        "sub/proctor_results.py",
        "proctor_results/__init__.py",
        "x/entry_points.txt",
    ):
        assert matches(name, patterns), name
    assert CommandCheck("t", [PY, "-m", "pytest"]).runs_pytest


# ---------------------------------------------------------------- the parser, by property

_OUTCOME = st.sampled_from(["passed", "failed", "skipped"])
_WHEN = st.sampled_from(["setup", "call", "teardown"])
_REPORTS = st.lists(
    st.tuples(st.sampled_from(["a.py::t", "a.py::u", "b.py::T::v[x]"]), _WHEN, _OUTCOME),
    max_size=12,
)


def _signed(
    tmp_path: Path, reports: list[tuple[str, str, str]], end: bool = True
) -> tuple[bytes, bytes]:
    d = tmp_path / "frames-dir"
    d.mkdir()
    key = os.urandom(32)
    (d / "key").write_bytes(key)
    writer = plugin._Reporter(str(d))
    writer.send("start")
    for node, when, outcome in reports:
        writer.send("test", id=node, when=when, outcome=outcome)
    if end:
        writer.send("end", exit=0)
    data = (d / "frames").read_bytes()
    (d / "frames").unlink()
    d.rmdir()
    return data, key


def _expected(reports: list[tuple[str, str, str]]) -> dict[str, str]:
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    out: dict[str, str] = {}
    for node, when, outcome in reports:
        o = "error" if outcome == "failed" and when != "call" else outcome
        if node not in out or rank[o] > rank[out[node]]:
            out[node] = o
    return out


@settings(max_examples=200, deadline=None)
@given(reports=_REPORTS)
def test_signed_frames_read_back_as_the_worst_report_of_each_test(
    tmp_path_factory: pytest.TempPathFactory, reports: list[tuple[str, str, str]]
) -> None:
    data, key = _signed(tmp_path_factory.mktemp("p"), reports)
    assert _parse(data, key) == _expected(reports)


@settings(max_examples=300, deadline=None)
@given(reports=_REPORTS, data=st.data())
def test_any_change_to_signed_frames_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
    reports: list[tuple[str, str, str]],
    data: st.DataObject,
) -> None:
    frames, key = _signed(tmp_path_factory.mktemp("p"), reports)
    lines = frames.splitlines()
    how = data.draw(st.sampled_from(["drop", "swap", "flip", "append", "cut"]))
    if how == "drop":
        del lines[data.draw(st.integers(0, len(lines) - 1))]
    elif how == "swap" and len(lines) > 1:
        i = data.draw(st.integers(0, len(lines) - 2))
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "flip":
        i = data.draw(st.integers(0, len(lines) - 1))
        j = data.draw(st.integers(0, len(lines[i]) - 1))
        lines[i] = (
            lines[i][:j] + bytes([lines[i][j] ^ data.draw(st.integers(1, 255))]) + lines[i][j + 1 :]
        )
    elif how == "append":
        lines.append(data.draw(st.binary(max_size=80)).replace(b"\n", b""))
    else:
        lines = lines[: data.draw(st.integers(0, len(lines) - 1))]
    with pytest.raises(ResultsError):
        _parse(b"\n".join(lines) + b"\n", key)


def test_a_session_that_never_ended_is_refused(tmp_path: Path) -> None:
    data, key = _signed(tmp_path, [("a.py::t", "call", "passed")], end=False)
    with pytest.raises(ResultsError, match="did not end") as caught:
        _parse(data, key)
    assert caught.value.kind == "unfinished"


def test_a_second_pytest_of_the_same_command_reports_nothing_and_does_not_fail(
    tmp_path: Path,
) -> None:
    # ``pytest a && pytest b``: the key is spent by the first session, whose
    # results stand; the second runs without the plugin (its exit code still counts).
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_b():\n    pass\n")
    channel = ResultsChannel.open()
    try:
        env = {**os.environ, **channel.env(os.environ)}
        line = f"{PY} -m pytest -q -p no:cacheprovider test_a.py && {PY} -m pytest -q -p no:cacheprovider test_b.py"
        done = subprocess.run(
            ["sh", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("1 passed") == 2, done.stdout
        assert channel.read() == {"test_a.py::test_a": "passed"}
    finally:
        channel.close()


async def test_without_a_baseline_a_failed_test_fails_the_check_whatever_the_exit(
    tmp_path: Path,
) -> None:
    # The code under test ends the process with 0 after pytest's session: the
    # results are whole and show the failure, and nothing is required by a baseline.
    (tmp_path / "pricing.py").write_text(
        "import atexit, os\n\ndef total(n):\n    return n * 11\n\natexit.register(os._exit, 0)\n"
    )
    (tmp_path / "test_pricing.py").write_text(PRICING_TEST + "\n\ndef test_other():\n    pass\n")
    check = CommandCheck("tests", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    evidence = await check.run_check(tmp_path, "d", "v")
    assert evidence.exit_code == 0  # the forged exit
    assert not evidence.passed
    assert "1 test(s) failed or errored: test_pricing.py::test_total" in evidence.excerpt
    # The positive control: without the failure, the same check passes.
    (tmp_path / "pricing.py").write_text("def total(n):\n    return n * 10\n")
    assert (await check.run_check(tmp_path, "d", "v")).passed
