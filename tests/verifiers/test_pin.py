"""
Verifying a candidate in place: the overlay shows a check what a copy would,
the workspace is never changed by a check, and any change to it while it is
judged is caught.
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from proctor._errors import ConfigError
from proctor.runtime._tools import sandbox as sb
from proctor.verifiers._candidate import TreeHasher
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._pin import CandidateMoved, Pin, in_place, pin_tree, pinned_digest
from proctor.verifiers._verifier import verify_snapshot

PY = sys.executable

needs_overlay = pytest.mark.skipif(
    sb.overlay_available() is not None, reason=f"no overlay here: {sb.overlay_available()}"
)


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "app.py").write_text("VALUE = 1\n")
    (ws / "notes.txt").write_text("keep me\n")
    (ws / "tests" / "test_app.py").write_text("def test_it():\n    assert True\n")
    (ws / "__pycache__").mkdir()
    (ws / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"planted")
    os.mkfifo(ws / "pipe")
    os.chmod(ws, 0o751)
    return ws


def _pinned(ws: Path) -> Pin:
    # Just written: the pin waits the racy window out once (a tenth of a second).
    pin = pin_tree(ws, ("__pycache__", "*.pyc"))
    assert pin is not None
    return pin


def _context(ws: Path, **extra: Any) -> CheckContext:
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    return CheckContext(sandbox=spec, ignore=("__pycache__", "*.pyc"), **extra)


def _leftovers() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("proctor-check-")}


def _tree(ws: Path) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for top, dirs, files in os.walk(ws):
        for name in dirs:
            found[os.path.relpath(os.path.join(top, name), ws) + "/"] = "dir"
        for name in files:
            path = os.path.join(top, name)
            rel = os.path.relpath(path, ws)
            found[rel] = Path(path).read_bytes() if os.path.isfile(path) else "special"
    return found


@needs_overlay
async def test_a_check_sees_what_a_copy_would_hold_and_never_changes_the_workspace(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    pin = _pinned(ws)
    before = _tree(ws)
    script = (
        "test -f app.py && test -f notes.txt"
        # ignored paths and special files are not there, as in a copy
        " && ! test -e __pycache__ && ! test -e pipe"
        # the workspace's mode shows at its root
        ' && test "$(stat -c %a .)" = 751'
        " && echo changed > app.py && rm notes.txt && mkdir -p new/deep && touch new/deep/f"
        " && mkdir __pycache__ && : > __pycache__/x.pyc && rm -r tests"
        " && test ! -e notes.txt && grep -q changed app.py"
    )
    check = CommandCheck(name="look", run=["/bin/sh", "-c", script])
    left = _leftovers()
    digest, evidence = await verify_snapshot(ws, "v", (check,), _context(ws), pin=pin)
    assert evidence[0].passed, evidence[0].excerpt
    assert digest == pin.manifest.digest
    assert _tree(ws) == before
    assert _leftovers() == left


@needs_overlay
async def test_each_check_sees_the_baseline_s_protected_files_not_the_candidate_s(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    original = (ws / "tests" / "test_app.py").read_bytes()
    (ws / "tests" / "test_app.py").write_text("def test_it():\n    pass  # gutted\n")
    (ws / "conftest.py").write_text("import pytest\n")
    (ws / "tests" / "conftest.py").write_text("import pytest\n")
    pin = _pinned(ws)
    files = {"tests/test_app.py": {"data": base64.b64encode(original).decode()}}
    script = (
        "grep -q 'assert True' tests/test_app.py && ! test -e conftest.py"
        " && ! test -e tests/conftest.py && echo gone > tests/test_app.py"
    )
    check = CommandCheck(name="look", run=["/bin/sh", "-c", script])
    second = CommandCheck(name="again", run=["/bin/sh", "-c", script])
    context = _context(ws, protected=("tests/**", "conftest.py"), baseline_files=files)
    _, evidence = await verify_snapshot(ws, "v", (check, second), context, pin=pin)
    # The second check sees the baseline again, not the first check's writes.
    assert [e.passed for e in evidence] == [True, True], [e.excerpt for e in evidence]
    assert "gutted" in (ws / "tests" / "test_app.py").read_text()


@attrs.frozen
class _Meddler:
    """A check that changes the workspace while the candidate is judged (a writer outside)."""

    meddle: Any
    name: str = "meddle"
    required: bool = True

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        self.meddle(snapshot)
        return Evidence(
            candidate_digest=digest, contract_version=contract_version, check=self.name, passed=True
        )


def _rewrite_keeping_mtime(ws: Path) -> None:
    st = os.stat(ws / "app.py")
    (ws / "app.py").write_text("VALUE = 2\n")
    os.utime(ws / "app.py", ns=(st.st_atime_ns, st.st_mtime_ns))


def _add_and_remove(ws: Path) -> None:
    (ws / "tests" / "conftest.py").write_text("x")
    (ws / "tests" / "conftest.py").unlink()


def _rename_back_and_forth(ws: Path) -> None:
    os.rename(ws / "app.py", ws / "tmp.py")
    os.rename(ws / "tmp.py", ws / "app.py")


@pytest.mark.parametrize(
    "meddle",
    [
        _rewrite_keeping_mtime,
        _add_and_remove,
        _rename_back_and_forth,
        lambda ws: (ws / "tests" / "__pycache__").mkdir(),
        lambda ws: os.chmod(ws / "app.py", 0o600),
    ],
    ids=["rewrite-same-mtime", "add-remove", "rename-back", "new-ignored-entry", "chmod"],
)
async def test_any_change_to_the_workspace_while_it_is_judged_is_caught(
    tmp_path: Path, meddle: Any
) -> None:
    ws = _workspace(tmp_path)
    pin = _pinned(ws)
    with pytest.raises(CandidateMoved):
        await verify_snapshot(ws, "v", (_Meddler(meddle),), _context(ws), pin=pin)


async def test_a_workspace_left_alone_is_not_moved(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    pin = _pinned(ws)

    def inside_ignored(ws: Path) -> None:
        # Not part of the candidate, and hidden from every check: not a move.
        (ws / "__pycache__" / "new.pyc").write_bytes(b"x")
        (ws / "app.py").read_bytes()

    _, evidence = await verify_snapshot(ws, "v", (_Meddler(inside_ignored),), _context(ws), pin=pin)
    assert evidence[0].passed


def test_a_tree_written_within_the_racy_window_is_not_pinned(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    waited: list[float] = []
    # The clock stands at the tree's newest change: it is always just written.
    newest = max(
        os.lstat(os.path.join(t, n)).st_ctime_ns for t, d, f in os.walk(ws) for n in [*d, *f]
    )
    hasher = TreeHasher(ws, ())
    digest, pin = pinned_digest(hasher, clock=lambda: newest, sleep=waited.append)
    assert pin is None
    assert digest == TreeHasher(ws, ()).digest()  # the digest is taken all the same
    assert len(waited) == 1  # waited the window out once, then gave up
    # A window later it holds still: pinned at once, without waiting.
    later = lambda: time.time_ns() + 10**9  # noqa: E731
    assert pinned_digest(hasher, clock=later, sleep=waited.append)[1] is not None
    assert len(waited) == 1


def test_a_tree_that_changes_while_it_is_walked_is_not_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _workspace(tmp_path)
    hasher = TreeHasher(ws, ())
    real = os.scandir

    def vanishing(path: Any) -> Any:
        # A directory removed between its parent's listing and its own.
        if str(path).endswith("tests"):
            for child in Path(path).iterdir():
                child.unlink()
            Path(path).rmdir()
        return real(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert pinned_digest(hasher, clock=lambda: time.time_ns() + 10**9)[1] is None


def test_what_cannot_be_verified_in_place_is_copied(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    check = CommandCheck(name="c", run=["true"])
    off = sb.SandboxSpec(writable=ws, mode="off")
    # Command checks without a sandbox that mounts overlays: a copy.
    assert not in_place(ws, (check,), None)
    assert not in_place(ws, (check,), off)
    # No command check: nothing runs in the tree, it is pinned.
    assert in_place(ws, (), None)
    odd = tmp_path / "a,b"
    odd.mkdir()
    assert not in_place(odd, (), None)


def test_an_overlay_needs_the_sandbox(tmp_path: Path) -> None:
    spec = sb.SandboxSpec(writable=tmp_path, mode="off", lower=tmp_path)
    with pytest.raises(ConfigError, match="needs mode auto"):
        sb.wrap(["true"], spec, tmp_path)
