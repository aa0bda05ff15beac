"""
Attacks by a scripted actor on a candidate verified in place (and, to compare,
from a copy): whatever it leaves in the workspace, the verdict is the copy's,
the run ends, and nothing of the verification is left behind.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from tests.redteam.conftest import COMPLETE, FIX, PY, TESTS, action, command
from tests.redteam.test_attacks import verified

from proctor.runtime._records import Disposition
from proctor.verifiers._pin import pinned_digest

__all__ = ("verified",)  # the fixture, shared with test_attacks


def _nothing_left(done: Any) -> None:
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("proctor-")]
    with open("/proc/self/mountinfo") as f:
        assert "proctor-check-" not in f.read()
    assert (done.workspace / "tests" / "test_pricing.py").read_text() == TESTS


async def test_a_timestamp_set_into_the_future_does_not_stall_verification(
    attack: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # touch -d 2100: the tree looks just written for 75 years. The pin waits
    # one racy window at most, gives up, and the candidate is copied.
    from proctor.runtime._control import controller

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    waited: list[float] = []

    def wait(seconds: float) -> None:
        waited.append(seconds)
        time.sleep(seconds)

    def pinned(hasher: Any) -> Any:
        return pinned_digest(hasher, sleep=wait)

    monkeypatch.setattr(controller, "pinned_digest", pinned)
    steps = [FIX, command("touch -d 2100-01-01 pricing.py tests"), COMPLETE]
    done = await attack(steps)
    assert done.disposition is Disposition.COMPLETED, done.result.evidence
    assert waited
    assert max(waited) < 1, waited
    _nothing_left(done)


@pytest.mark.parametrize(
    "reshape",
    [
        "rm tests/test_pricing.py && mkdir tests/test_pricing.py && : > tests/test_pricing.py/x",
        "rm -r tests && ln -s . tests",
        "rm tests/test_pricing.py && mkfifo tests/test_pricing.py",
    ],
    ids=["file-to-dir", "dir-to-link", "file-to-fifo"],
)
async def test_a_reshaped_protected_path_does_not_complete_or_crash(
    attack: Any, verified: str, reshape: str
) -> None:
    done = await attack([FIX, command(reshape), COMPLETE])
    # The scope check rejects the change; the run ends as any rejected one does.
    assert done.disposition is not Disposition.COMPLETED
    assert "crash" not in str(done.result.stop_reason), done.result
    tests = next(e for e in done.result.evidence if e.check == "tests")
    assert tests.passed, tests.excerpt  # the baseline's tests ran, on the fix
    _nothing_left_but_the_workspace()


def _nothing_left_but_the_workspace() -> None:
    assert not [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("proctor-")]
    with open("/proc/self/mountinfo") as f:
        assert "proctor-check-" not in f.read()


async def test_a_nested_conftest_added_by_the_candidate_does_not_run(
    attack: Any, verified: str
) -> None:
    clear = "def pytest_collection_modifyitems(items):\n    items.clear()\n"
    steps = [
        action("write_file", path="tests/unit/deep/conftest.py", content=clear),
        command("mkdir -p lib/deep && cp tests/unit/deep/conftest.py lib/deep/conftest.py"),
        action("write_file", path="lib/deep/test_x.py", content="def test_x():\n    pass\n"),
        COMPLETE,
    ]
    done = await attack(steps)
    assert done.disposition is not Disposition.COMPLETED
    tests = next(e for e in done.result.evidence if e.check == "tests")
    assert not tests.passed
    _nothing_left_but_the_workspace()


async def test_planted_whiteouts_fifos_and_xattrs_change_no_verdict(
    attack: Any, verified: str
) -> None:
    plant = (
        "import os, stat\n"
        # a whiteout where the buggy module's fixed twin would be hidden, a FIFO
        # a test would block on, overlay attributes an unprivileged mount reads
        "os.mknod('pricing_fixed.py', stat.S_IFCHR | 0o644, os.makedev(0, 0))\n"
        "os.mkfifo('block')\n"
        "os.setxattr('pricing.py', 'user.overlay.whiteout', b'')\n"
        "os.setxattr('tests', 'user.overlay.opaque', b'y')\n"
    )
    steps = [
        action("write_file", path="plant.py", content=plant),
        command(f"{PY} plant.py && rm plant.py"),
        COMPLETE,
    ]
    done = await attack(steps)
    # The buggy program is still there for the checks to find: not completed.
    assert done.disposition is not Disposition.COMPLETED
    assert not next(e for e in done.result.evidence if e.check == "tests").passed
    _nothing_left(done)


# The program under test runs in pytest's own process: at its exit, after
# pytest's last report, it rewrites the per-test results without its failures
# (the results directory is in the process's first environment) and exits 0.
# No harness file is touched; the scope check has nothing to refuse.
FORGE = (
    "import atexit, os\n\n\n"
    "def total(n):\n    return n * 10 if n > 10 else n * 11\n\n\n"
    "def _forge():\n"
    "    env = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
    "    where = next(v for v in env if v.startswith(b'PROCTOR_RESULTS='))[16:].decode()\n"
    "    path = os.path.join(where, 'frames')\n"
    "    kept = [line for line in open(path, 'rb') if b'failed' not in line]\n"
    "    open(path, 'wb').write(b''.join(kept))\n"
    "    os._exit(0)\n\n\n"
    "atexit.register(_forge)\n"
)


async def test_a_program_that_forges_its_own_report_does_not_complete(
    attack: Any, verified: str
) -> None:
    done = await attack([action("write_file", path="pricing.py", content=FORGE), COMPLETE])
    assert done.disposition is not Disposition.COMPLETED, done.result.evidence
    tests = [e for e in done.result.evidence if e.check == "tests" and not e.baseline]
    assert tests, done.result.evidence
    # The forgery ran, and was seen for what it is.
    assert all("results_forged" in e.findings for e in tests), tests
    assert all("not the plugin's" in e.excerpt or "out of order" in e.excerpt for e in tests), tests
