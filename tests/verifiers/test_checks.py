from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._errors import ConfigError
from proctor._wire import converter, dumps, loads
from proctor.verifiers import _checks
from proctor.verifiers._checks import CommandCheck, contract_version
from proctor.verifiers._evidence import EXCERPT_CHARS, Evidence

PY = sys.executable
DIGEST = "d" * 64
VERSION = "v1"

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testsuite name="pytest" tests="4" failures="1" errors="1">
    <testcase classname="tests.test_math" name="test_add"/>
    <testcase classname="tests.test_math" name="test_sub"><failure message="boom"/></testcase>
    <testcase classname="tests.test_io" name="test_read"><error message="oops"/></testcase>
    <testcase name="test_bare"><failure/></testcase>
    <testcase classname="tests.test_io" name="test_skip"><skipped/></testcase>
  </testsuite>
</testsuites>
"""


def python(code: str, **kwargs: object) -> CommandCheck:
    return CommandCheck("check", (PY, "-c", code), **kwargs)  # type: ignore[arg-type]


async def wait_dead(pid: int) -> None:
    """Wait until a process has ended: a pidfd becomes readable when it does."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(10):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)


needs_pidfd = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open")

# A grandchild that records its pid and sleeps; its parent then does what follows.
SPAWN = (
    "import subprocess, sys, pathlib\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']{session})\n"
    "pathlib.Path('child.pid').write_text(str(child.pid))\n"
)


# --------------------------------------------------------------------------- commands


async def test_a_passing_command(tmp_path: Path) -> None:
    check = python(
        "import os, sys\n"
        "print('snapshot', any(k.startswith('PROCTOR') for k in os.environ))\n"
        "print('stdin', repr(sys.stdin.read()))\n"
        "print('to stderr', file=sys.stderr)\n"
        "open('made.txt', 'w').write('here')\n"
    )
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)

    assert evidence.passed
    assert evidence.exit_code == 0
    assert evidence.is_for(DIGEST, VERSION)
    assert evidence.check == "check"
    assert evidence.command == (PY, "-c", check.run[2])
    assert evidence.findings == ()
    assert evidence.required
    # Nothing in the environment tells the program it is being verified.
    assert evidence.excerpt == "snapshot False\nstdin ''\nto stderr\n"
    expected = hashlib.blake2b(evidence.excerpt.encode(), digest_size=16).hexdigest()
    assert evidence.output_digest == expected
    assert (tmp_path / "made.txt").read_text() == "here"  # it ran in the snapshot
    assert evidence.duration >= 0
    assert evidence.at > 0


async def test_a_failing_command(tmp_path: Path) -> None:
    evidence = await python("print('bad'); raise SystemExit(3)").run_check(
        tmp_path, DIGEST, VERSION
    )
    assert not evidence.passed
    assert evidence.exit_code == 3
    assert evidence.excerpt == "bad\n"


async def test_the_expected_exit_code_decides(tmp_path: Path) -> None:
    check = python("raise SystemExit(5)", expect_exit=5, required=False)
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)
    assert evidence.passed
    assert not evidence.required


async def test_a_shell_string(tmp_path: Path) -> None:
    check = CommandCheck("shell", "echo one && echo two >&2 && exit 0")
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)
    assert evidence.passed
    assert evidence.command == ("/bin/sh", "-c", "echo one && echo two >&2 && exit 0")
    assert evidence.excerpt == "one\ntwo\n"


async def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    check = CommandCheck("missing", ["proctor-no-such-command"])
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)
    assert not evidence.passed
    assert evidence.exit_code is None
    assert evidence.findings == ("not_started",)
    assert "could not start" in evidence.excerpt
    assert "proctor-no-such-command" in evidence.excerpt


async def test_a_missing_snapshot_directory(tmp_path: Path) -> None:
    evidence = await python("pass").run_check(tmp_path / "absent", DIGEST, VERSION)
    assert not evidence.passed
    assert evidence.findings == ("not_started",)


async def test_the_excerpt_is_bounded_and_the_digest_covers_everything(tmp_path: Path) -> None:
    code = "import sys\nfor i in range(20000): sys.stdout.write(f'line {i}\\n')\nprint('END')"
    evidence = await python(code).run_check(tmp_path, DIGEST, VERSION)
    output = "".join(f"line {i}\n" for i in range(20000)) + "END\n"
    assert evidence.passed
    assert evidence.excerpt == output[-EXCERPT_CHARS:]
    assert evidence.output_digest == hashlib.blake2b(output.encode(), digest_size=16).hexdigest()


@needs_pidfd
async def test_the_time_limit_kills_the_process_group(tmp_path: Path) -> None:
    check = python(SPAWN.format(session="") + "import time; time.sleep(60)", time_limit=0.5)
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)

    assert not evidence.passed
    assert evidence.findings == ("time_limit",)
    assert evidence.exit_code == -signal.SIGKILL
    assert "time limit of 0.5s" in evidence.excerpt
    await wait_dead(int((tmp_path / "child.pid").read_text()))


@needs_pidfd
async def test_children_left_behind_are_killed(tmp_path: Path) -> None:
    # The grandchild inherits the output: unless it is killed, the output stays open.
    evidence = await python(SPAWN.format(session="") + "print('done')").run_check(
        tmp_path, DIGEST, VERSION
    )
    assert evidence.passed
    assert evidence.findings == ()
    assert evidence.excerpt == "done\n"
    await wait_dead(int((tmp_path / "child.pid").read_text()))


@needs_pidfd
async def test_output_held_open_outside_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_checks, "_DRAIN_GRACE", 0.1)
    code = SPAWN.format(session=", start_new_session=True") + "print('done')"
    try:
        evidence = await python(code).run_check(tmp_path, DIGEST, VERSION)
    finally:
        escaped = int((tmp_path / "child.pid").read_text())
        os.kill(escaped, signal.SIGKILL)
    assert evidence.passed
    assert evidence.findings == ("output_held_open",)
    assert evidence.excerpt.startswith("done\n[proctor] ")


@needs_pidfd
async def test_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    # The grandchild's pid comes through a FIFO: the check is cancelled once it runs.
    os.mkfifo(tmp_path / "child.pid")
    fifo = os.open(tmp_path / "child.pid", os.O_RDONLY | os.O_NONBLOCK)
    try:
        check = python(SPAWN.format(session="") + "import time; time.sleep(60)")
        async with anyio.create_task_group() as tg:
            tg.start_soon(check.run_check, tmp_path, DIGEST, VERSION)
            with anyio.fail_after(10):
                await anyio.wait_readable(fifo)
            pid = int(os.read(fifo, 64))
            tg.cancel_scope.cancel()
    finally:
        os.close(fifo)
    await wait_dead(pid)


# --------------------------------------------------------------------------- junit


async def test_junit_failing_tests(tmp_path: Path) -> None:
    code = f"import pathlib, sys; pathlib.Path('out/report.xml').write_text({JUNIT!r}); sys.exit(1)"
    (tmp_path / "out").mkdir()
    check = python(code, junit="out/report.xml")
    evidence = await check.run_check(tmp_path, DIGEST, VERSION)

    assert not evidence.passed
    assert evidence.failing_tests == (
        "test_bare",
        "tests.test_io.test_read",
        "tests.test_math.test_sub",
    )
    assert evidence.findings == ()


async def test_junit_report_missing(tmp_path: Path) -> None:
    # A report already in the snapshot is not this run's: it is removed first.
    (tmp_path / "report.xml").write_text(JUNIT)
    evidence = await python("pass", junit="report.xml").run_check(tmp_path, DIGEST, VERSION)
    assert evidence.passed
    assert evidence.failing_tests == ()
    assert evidence.findings == ("junit_missing",)
    assert "report.xml was not written" in evidence.excerpt


async def test_junit_report_invalid(tmp_path: Path) -> None:
    code = "open('report.xml', 'w').write('<testsuite><testcase')"
    evidence = await python(code, junit="report.xml").run_check(tmp_path, DIGEST, VERSION)
    assert evidence.passed
    assert evidence.findings == ("junit_invalid",)
    assert "could not be parsed" in evidence.excerpt


# --------------------------------------------------------------------------- the record


def test_a_list_command_becomes_a_tuple() -> None:
    check = CommandCheck("tests", ["pytest", "-q"])
    assert check.run == ("pytest", "-q")
    assert check.argv == ("pytest", "-q")
    assert hash(check) == hash(CommandCheck("tests", ("pytest", "-q")))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "run": ["x"]}, "name"),
        ({"name": "t", "run": []}, "argv"),
        ({"name": "t", "run": "  "}, "empty shell command"),
        ({"name": "t", "run": ["x"], "time_limit": 0}, "time_limit"),
        ({"name": "t", "run": ["x"], "time_limit": float("nan")}, "time_limit"),
        ({"name": "t", "run": ["x"], "junit": "../report.xml"}, "junit"),
        ({"name": "t", "run": ["x"], "junit": "/tmp/report.xml"}, "junit"),
    ],
)
def test_bad_checks_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CommandCheck(**kwargs)  # type: ignore[arg-type]


_text = st.text(max_size=20)
_evidence = st.builds(
    Evidence,
    candidate_digest=_text,
    contract_version=_text,
    check=_text,
    passed=st.booleans(),
    command=st.lists(_text, max_size=3).map(tuple),
    exit_code=st.none() | st.integers(-255, 255),
    output_digest=_text,
    excerpt=st.text(max_size=200),
    duration=st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    verifier=_text,
    failing_tests=st.lists(_text, max_size=3).map(tuple),
    at=st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    findings=st.lists(_text, max_size=3).map(tuple),
    required=st.booleans(),
)


@given(_evidence)
def test_evidence_round_trips(evidence: Evidence) -> None:
    assert converter.structure(converter.unstructure(evidence), Evidence) == evidence
    assert loads(dumps(evidence), Evidence) == evidence


def test_evidence_is_bound_to_digest_and_contract_version() -> None:
    evidence = Evidence(DIGEST, VERSION, "tests", passed=True)
    assert evidence.is_for(DIGEST, VERSION)
    assert not evidence.is_for("e" * 64, VERSION)
    assert not evidence.is_for(DIGEST, "v2")


# --------------------------------------------------------------------------- contract version


def test_contract_version_is_canonical() -> None:
    contract = {"checks": [{"name": "tests", "run": ["pytest", "-q"]}], "protected": ["tests/**"]}
    reordered = {"protected": ("tests/**",), "checks": [{"run": ("pytest", "-q"), "name": "tests"}]}
    assert contract_version(contract) == contract_version(reordered)
    assert contract_version(contract) != contract_version({**contract, "protected": []})
    assert len(contract_version({})) == 32


@pytest.mark.parametrize("payload", [{"x": object()}, {"x": float("nan")}, {"x": {1, 2}}])
def test_contract_version_needs_json(payload: object) -> None:
    with pytest.raises(ConfigError, match="not JSON-able"):
        contract_version(payload)


def test_contract_versions_keep_their_bytes() -> None:
    # Journaled evidence names contract versions: the hash of a given contract never
    # changes, whoever owns the hashing. The value is what every release computed.
    payload = {
        "checks": [{"name": "tests", "run": ["pytest", "-q"]}],
        "protected": ["tests/**"],
        "kind": "build",
        "note": "é",
    }
    assert contract_version(payload) == "e1212bd86a86db93cfbc6327c4bac5c3"
