"""
Attacks on a candidate verified in place: what the candidate's own code can try
from inside a check (it runs there), what an actor can leave in the workspace
for the overlay to show differently from a copy, and what the pin must not be
stalled or fooled by.

Each test makes the attack and asserts that it fails: the check sees what a
copy would hold, the workspace is unchanged, nothing is left behind.
"""

from __future__ import annotations

import base64
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from tests.redteam.conftest import alive_with

from proctor._errors import ConfigError
from proctor.runtime._tools import sandbox as sb
from proctor.verifiers._candidate import TreeHasher, _timestamp_window
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._pin import Pin, in_place, pin_tree, pinned_digest
from proctor.verifiers._verifier import verify_snapshot

PY = sys.executable
IGNORE = ("__pycache__", "*.pyc", "node_modules")

needs_overlay = pytest.mark.skipif(
    sb.overlay_available() is not None, reason=f"no overlay here: {sb.overlay_available()}"
)


def _workspace(root: Path, name: str = "ws") -> Path:
    ws = root / name
    (ws / "tests").mkdir(parents=True)
    (ws / "app.py").write_text("VALUE = 1\n")
    (ws / "tests" / "test_app.py").write_text("def test_it():\n    assert True\n")
    return ws


def _settle(ws: Path) -> None:
    """Move every timestamp of the tree out of the racy window (no waiting)."""
    past = time.time_ns() - 10 * 10**9
    for top, dirs, files in os.walk(ws, topdown=False):
        for name in [*dirs, *files]:
            os.utime(os.path.join(top, name), ns=(past, past), follow_symlinks=False)
    os.utime(ws, ns=(past, past))


def _pinned(ws: Path, ignore: tuple[str, ...] = IGNORE) -> Pin:
    pin = pin_tree(ws, ignore)
    assert pin is not None
    return pin


def _context(ws: Path, **extra: Any) -> CheckContext:
    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY))
    return CheckContext(sandbox=spec, ignore=IGNORE, **extra)


def _snapshot(ws: Path) -> dict[str, Any]:
    """Every entry of the tree with its type, mode, owner, content and xattrs."""
    found: dict[str, Any] = {}
    for top, dirs, files in os.walk(os.fsencode(ws)):
        for name in [*dirs, *files]:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content: Any = None
            if stat.S_ISREG(st.st_mode):
                content = Path(os.fsdecode(path)).read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            found[os.fsdecode(os.path.relpath(path, os.fsencode(ws)))] = (
                st.st_mode,
                st.st_uid,
                st.st_ino,
                st.st_mtime_ns,
                st.st_ctime_ns,
                content,
                sorted(os.listxattr(path, follow_symlinks=False)),
            )
    return found


def _leftovers() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("proctor-check-")}


def _overlay_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if "proctor-check-" in line]


async def _judge(
    ws: Path, script: str, pin: Pin | None = None, **context: Any
) -> tuple[Pin, Evidence]:
    pin = pin if pin is not None else _pinned(ws)
    check = CommandCheck(name="attack", run=[PY, "-c", script])
    _, evidence = await verify_snapshot(ws, "v", (check,), _context(ws, **context), pin=pin)
    return pin, evidence[0]


# --------------------------------------------------------------------------- the pin itself


def test_a_timestamp_in_the_future_does_not_stall_the_pin(tmp_path: Path) -> None:
    # An actor's `touch -d 2100-01-01 app.py`: the tree looks "just written"
    # for 75 years. The pin waits the racy window out once, never longer, and
    # then gives up (the candidate is copied instead).
    ws = _workspace(tmp_path)
    future = int(time.mktime((2100, 1, 1, 0, 0, 0, 0, 0, -1))) * 10**9
    os.utime(ws / "app.py", ns=(future, future))
    waited: list[float] = []
    digest, pin = pinned_digest(TreeHasher(ws, IGNORE), sleep=waited.append)
    assert pin is None
    assert digest == TreeHasher(ws, IGNORE).digest()
    window = _timestamp_window(os.fspath(ws))
    assert sum(waited) <= window + 0.02, waited


def test_a_directory_timestamp_in_the_future_does_not_stall_the_pin(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    future = time.time_ns() + 10**18
    os.utime(ws / "tests", ns=(future, future))
    waited: list[float] = []
    assert pinned_digest(TreeHasher(ws, IGNORE), sleep=waited.append)[1] is None
    assert sum(waited) <= _timestamp_window(os.fspath(ws)) + 0.02, waited


# --------------------------------------------------------------------------- what the view shows

# Lists the tree as the check sees it (type, mode, content) and prints it; the
# same script over a copy gives the reference.
LIST = r"""
import os, stat, sys, hashlib
rows = []
for top, dirs, files in os.walk(b"."):
    dirs.sort()
    for name in sorted(dirs + files):
        p = os.path.join(top, name)
        st = os.lstat(p)
        data = b""
        if stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                data = f.read()
        elif stat.S_ISLNK(st.st_mode):
            data = os.readlink(p)
        rows.append(repr((p, stat.filemode(st.st_mode), hashlib.sha256(data).hexdigest()[:12])))
print("\n".join(rows))
"""


async def _views(ws: Path, **context: Any) -> tuple[Evidence, Evidence]:
    """The listing check's evidence in place and over a copy of the same candidate."""
    check = CommandCheck(name="list", run=[PY, "-c", LIST])
    pin = _pinned(ws)
    _, placed = await verify_snapshot(ws, "v", (check,), _context(ws, **context), pin=pin)
    _, copied = await verify_snapshot(ws, "v", (check,), _context(ws, **context))
    return placed[0], copied[0]


ODD_NAMES = [
    "new\nline.py",
    "com,ma.py",
    "co:lon.py",
    "back\\slash.py",
    "-rf",
    "--help.py",
    " lead space",
    "tab\tname",
    "quote'\"",
    "$(touch PWNED)",
    "dir,odd:\\\n/inner.py",
]


def _write_raw(path: bytes, data: bytes) -> None:
    Path(os.fsdecode(path)).write_bytes(data)


@needs_overlay
async def test_odd_names_are_seen_as_a_copy_holds_them(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    for name in ODD_NAMES:
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name!r}\n")
    # Non-UTF-8 names, as a file, a directory and an ignored directory.
    raw = os.fsencode(ws)
    os.mkdir(raw + b"/dir\xc3(")
    os.makedirs(raw + b"/pkg\xff/__pycache__")
    _write_raw(raw + b"/bad\xff\xfe.py", b"x = 1\n")
    _write_raw(raw + b"/dir\xc3(/in\x80.py", b"y = 2\n")
    _write_raw(raw + b"/pkg\xff/__pycache__/m.cpython-311.pyc", b"planted")
    os.mkfifo(raw + b"/fifo,\n\xff")
    (ws / "odd\ndir" / "__pycache__").mkdir(parents=True)
    (ws / "odd\ndir" / "__pycache__" / "x.pyc").write_bytes(b"planted")
    before = _snapshot(ws)
    placed, copied = await _views(ws)
    assert placed.passed, placed.excerpt
    assert copied.passed, copied.excerpt
    assert placed.output_digest == copied.output_digest, (placed.excerpt, copied.excerpt)
    assert "planted" not in placed.excerpt
    assert "fifo" not in placed.excerpt
    assert _snapshot(ws) == before
    assert not (ws / "PWNED").exists()


@needs_overlay
@pytest.mark.parametrize(
    "name", ["sp ace", "eq=ual", "quo'te", "$(touch PWNED)", "-dash", "ü", "semi;colon", "#hash"]
)
async def test_a_workspace_path_the_mount_options_can_hold_is_verified_in_place(
    tmp_path: Path, name: str
) -> None:
    ws = _workspace(tmp_path, name)
    before = _snapshot(ws)
    pin, ev = await _judge(
        ws, "import app, os; assert app.VALUE == 1; open('app.py', 'w').write('VALUE = 2')"
    )
    assert ev.passed, ev.excerpt
    assert _snapshot(ws) == before
    assert not pin.moved()
    assert not (tmp_path / "PWNED").exists()
    assert not (ws / "PWNED").exists()


def test_a_workspace_path_with_a_double_quote_is_copied(tmp_path: Path) -> None:
    # mount(8) reads `"` as a quoted value's start: the overlay would not mount
    # and every check would fail in place where a copy passes.
    ws = _workspace(tmp_path, 'quo"te')
    assert not in_place(ws, (CommandCheck(name="c", run=["true"]),), _context(ws).sandbox)
    spec = sb.SandboxSpec(writable=tmp_path, lower=ws)
    with pytest.raises(ConfigError, match="may not hold"):
        sb.wrap(["true"], spec, tmp_path)


@needs_overlay
async def test_overlay_xattrs_planted_by_an_actor_change_nothing(tmp_path: Path) -> None:
    # An actor can set user.* xattrs (not trusted.*, which need the host's
    # CAP_SYS_ADMIN); an overlay mounted without `userxattr` reads only
    # trusted.overlay.*: an opaque directory, a whiteout, a redirect planted as
    # user.overlay.* hide nothing.
    ws = _workspace(tmp_path)
    (ws / "pkg").mkdir()
    (ws / "pkg" / "mod.py").write_text("Z = 3\n")
    (ws / "other").mkdir()
    (ws / "other" / "o.py").write_text("O = 4\n")
    os.setxattr(ws / "pkg", "user.overlay.opaque", b"x")
    os.setxattr(ws / "pkg" / "mod.py", "user.overlay.whiteout", b"")
    os.setxattr(ws / "tests", "user.overlay.opaque", b"y")
    os.setxattr(ws / "other", "user.overlay.redirect", b"/pkg")
    os.setxattr(ws / "app.py", "user.overlay.metacopy", b"")
    with pytest.raises(PermissionError):
        _as_sandboxed_root(ws, "import os; os.setxattr('app.py', 'trusted.overlay.opaque', b'y')")
    placed, copied = await _views(ws)
    assert placed.output_digest == copied.output_digest, (placed.excerpt, copied.excerpt)
    assert "mod.py" in placed.excerpt
    assert "o.py" in placed.excerpt


def _as_sandboxed_root(ws: Path, code: str) -> None:
    """Run ``code`` as an actor's command runs (the sandbox on the workspace itself)."""
    import subprocess

    spec = sb.SandboxSpec(writable=ws, ro_binds=sb.python_binds(PY), use_cgroup=False)
    done = subprocess.run(
        sb.wrap([PY, "-c", code], spec, ws), capture_output=True, text=True, check=False
    )
    if "PermissionError" in done.stderr:
        raise PermissionError(done.stderr)
    assert done.returncode == 0, done.stderr


@needs_overlay
async def test_whiteouts_and_special_files_an_actor_makes_are_hidden_as_a_copy_leaves_them_out(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    (ws / "pkg").mkdir()
    (ws / "pkg" / "keep.py").write_text("K = 1\n")
    # What an actor can make in its sandbox: a whiteout (char 0/0, allowed to
    # anyone since Linux 5.8), FIFOs, a socket.
    _as_sandboxed_root(
        ws,
        "import os, socket, stat\n"
        "os.mknod('pkg/gone.py', stat.S_IFCHR | 0o644, os.makedev(0, 0))\n"
        "os.mknod('tests/conftest.py', stat.S_IFCHR | 0o644, os.makedev(0, 0))\n"
        "os.mkfifo('pkg/pipe.py')\n"
        "s = socket.socket(socket.AF_UNIX); s.bind('pkg/sock')\n",
    )
    _settle(ws)
    placed, copied = await _views(ws)
    assert placed.output_digest == copied.output_digest, (placed.excerpt, copied.excerpt)
    assert "keep.py" in placed.excerpt
    assert "pipe" not in placed.excerpt


@needs_overlay
async def test_unreadable_files_and_directories_are_seen_as_a_copy_holds_them(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    (ws / "locked").mkdir()
    (ws / "locked" / "secret.py").write_text("S = 1\n")
    (ws / "noread.py").write_text("N = 1\n")
    os.chmod(ws / "noread.py", 0)
    os.chmod(ws / "locked", 0)
    try:
        placed, copied = await _views(ws)
    finally:
        os.chmod(ws / "locked", 0o755)
    assert placed.passed == copied.passed, (placed.excerpt, copied.excerpt)
    assert placed.exit_code == copied.exit_code


# --------------------------------------------------------------------------- a hostile check

ESCAPE = r"""
import ctypes, os, re, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
ws = os.getcwd()
outside = sys.argv[1]
got = []
def tried(name, ok):
    got.append(f"{name}:{'ESCAPED' if ok else 'blocked'}")
tried("umount", libc.umount2(ws.encode(), 2) == 0)
tried("umount-lazy", libc.umount2(ws.encode(), 2 | 8) == 0)
tried("mount-tmpfs", libc.mount(b"none", ws.encode(), b"tmpfs", 0, None) == 0)
tried("remount-rw-root", libc.mount(None, b"/", None, 32 | 4096, None) == 0)
tried("bind-proc-root", libc.mount(b"/proc/1/root", b"/tmp", None, 4096, None) == 0)
info = open("/proc/self/mountinfo").read()
for key in ("upperdir", "workdir"):
    paths = re.findall(key + r"=([^,\s]+)", info)
    tried(key + "-named", not paths)  # "blocked": the options are visible, which is no escape
    for path in paths:
        tried(key + "-exists", os.path.exists(path))
        try:
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, key + "-MARK"), "w") as f:
                f.write("x")
        except OSError:
            pass
        # Written where the check's own writes go, it would show in the view.
        tried(key + "-write", os.path.exists(os.path.join(ws, key + "-MARK")))
# The lower directory is the workspace's own path: the merged view. Write it.
open("app.py", "w").write("VALUE = 666\n")
os.setxattr("tests", "user.x", b"y")
os.chmod("tests", 0)
os.utime("app.py", (0, 0))
tried("outside-visible", os.path.exists(outside))
tried("chroot-out", libc.chroot(b"/proc/1/root") == 0 and os.path.exists(outside))
userns = subprocess.run(["unshare", "-U", "-m", "true"], capture_output=True)
tried("userns", userns.returncode == 0)
print(" ".join(got))
"""


@needs_overlay
async def test_a_check_cannot_unmount_remount_or_reach_the_layers(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    _settle(ws)
    before = _snapshot(ws)
    left = _leftovers()
    outside = tmp_path / "outside-marker"
    outside.write_text("on the host only")
    pin = _pinned(ws)
    check = CommandCheck(name="attack", run=[PY, "-c", ESCAPE, str(outside)])
    _, evidence = await verify_snapshot(ws, "v", (check,), _context(ws), pin=pin)
    ev = evidence[0]
    assert ev.passed, ev.excerpt
    tries = dict(t.split(":") for t in ev.excerpt.split())
    # The overlay's options are seen (mountinfo), nothing else of the host.
    assert tries.pop("upperdir-named") == tries.pop("workdir-named") == "blocked"
    assert set(tries.values()) == {"blocked"}, tries
    assert "upperdir-write" in tries
    assert _snapshot(ws) == before
    assert not pin.moved()
    assert _leftovers() == left
    assert not _overlay_mounts()


@needs_overlay
async def test_a_check_that_empties_and_rearranges_the_tree_leaves_the_workspace_alone(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    (ws / "pkg" / "sub").mkdir(parents=True)
    (ws / "pkg" / "sub" / "m.py").write_text("M = 1\n")
    (ws / "link").symlink_to("pkg/sub")
    os.link(ws / "app.py", ws / "hard.py")
    _settle(ws)
    before = _snapshot(ws)
    left = _leftovers()
    script = (
        "import os, shutil\n"
        "os.rename('pkg', 'moved')\n"  # a directory renamed: a redirect in the upper
        "os.rename('moved/sub', 'sub2')\n"
        "open('hard.py', 'a').write('changed through the hard link')\n"
        "os.symlink('/etc/passwd', 'evil')\n"
        "try:\n"
        "    os.mknod('app.py.new', 0o20644, os.makedev(0, 0))\n"
        "except PermissionError:\n"
        "    pass\n"
        "for name in os.listdir('.'):\n"
        "    p = name\n"
        "    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        "os.mkdir('deep')\n"
        "os.chdir('deep')\n"
        "for _ in range(3000):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "open('f', 'w').write('x')\n"
        "os.chmod('.', 0)\n"
    )
    pin, ev = await _judge(ws, script)
    assert ev.passed, ev.excerpt
    assert _snapshot(ws) == before
    assert not pin.moved()
    assert _leftovers() == left
    assert not _overlay_mounts()


LEAVE = r"""
import os, subprocess, sys
if any(os.path.exists(p) for p in ("LEFT", "/tmp/LEFT", os.path.expanduser("~/LEFT"))):
    print("SAW-LEFT"); sys.exit(3)
for path in ("LEFT", "/tmp/LEFT", os.path.expanduser("~/LEFT"), "tests/LEFT"):
    open(path, "w").write("x")
# Something that outlives the check, writing into the view later.
subprocess.Popen(["/bin/sh", "-c", "sleep 2; echo late > LATE; sleep 1000"], start_new_session=True)
"""


@needs_overlay
async def test_nothing_a_check_writes_survives_into_the_next_check_or_the_workspace(
    tmp_path: Path,
) -> None:
    ws = _workspace(tmp_path)
    _settle(ws)
    before = _snapshot(ws)
    left = _leftovers()
    checks = tuple(CommandCheck(name=f"leave{i}", run=[PY, "-c", LEAVE]) for i in range(2))
    pin = _pinned(ws)
    _, evidence = await verify_snapshot(ws, "v", checks, _context(ws), pin=pin)
    assert [e.passed for e in evidence] == [True, True], [e.excerpt for e in evidence]
    # and again: a second verification sees none of the first's either
    _, evidence = await verify_snapshot(ws, "v", checks, _context(ws), pin=pin)
    assert [e.passed for e in evidence] == [True, True], [e.excerpt for e in evidence]
    assert _snapshot(ws) == before
    assert not (ws / "LATE").exists()
    assert not (ws / "LEFT").exists()
    assert _leftovers() == left
    assert not _overlay_mounts()
    assert not alive_with("echo late > LATE")


# ------------------------------------------------------------------------ reports the host reads

HOST_XML = '<testsuite><testcase classname="host" name="SECRET"><failure/></testcase></testsuite>'


@needs_overlay
@pytest.mark.parametrize("verified", ["in place", "copy"])
async def test_a_report_linked_to_a_host_file_is_not_read(tmp_path: Path, verified: str) -> None:
    # The check's command writes its JUnit report as a symlink to a file of the
    # host's that the sandbox cannot see; the verifier reads the report on the
    # host, after the check: it must not follow the link out of the check's tree.
    ws = _workspace(tmp_path)
    secret = tmp_path / "host.xml"
    secret.write_text(HOST_XML)
    script = f"import os; os.symlink({str(secret)!r}, 'report.xml')"
    check = CommandCheck(name="junit", run=[PY, "-c", script], junit="report.xml")
    pin = _pinned(ws) if verified == "in place" else None
    _, evidence = await verify_snapshot(ws, "v", (check,), _context(ws), pin=pin)
    assert "SECRET" not in repr(evidence[0]), evidence[0]


@needs_overlay
@pytest.mark.parametrize("verified", ["in place", "copy"])
async def test_a_pytest_report_swapped_for_a_link_to_a_host_file_is_not_read(
    tmp_path: Path, verified: str
) -> None:
    # The candidate's code runs in pytest's process: at its exit, after pytest
    # wrote the report, it puts a symlink to a host file in the report's place.
    ws = _workspace(tmp_path)
    secret = tmp_path / "host.xml"
    secret.write_text(HOST_XML.replace("<testcase ", '<testcase file="host.py" '))
    (ws / "tests" / "test_swap.py").write_text(
        "import atexit, os\n"
        "env = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
        "where = next(v for v in env if v.startswith(b'PROCTOR_RESULTS='))[16:].decode()\n"
        "report = os.path.join(where, 'frames')\n"
        "def swap():\n"
        "    os.unlink(report)\n"
        f"    os.symlink({str(secret)!r}, report)\n"
        "atexit.register(swap)\n"
        "def test_ok():\n    pass\n"
    )
    _settle(ws)
    check = CommandCheck(name="tests", run=[PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    pin = _pinned(ws) if verified == "in place" else None
    _, evidence = await verify_snapshot(ws, "v", (check,), _context(ws), pin=pin)
    assert "SECRET" not in repr(evidence[0]), evidence[0]
    assert not evidence[0].passed
    assert "results_missing" in evidence[0].findings, evidence[0]


# ------------------------------------------------------------------------ protected paths reshaped


def _reshape_dir(ws: Path) -> None:
    (ws / "tests" / "test_app.py").unlink()
    (ws / "tests" / "test_app.py").mkdir()
    (ws / "tests" / "test_app.py" / "inner.py").write_text("planted\n")


def _reshape_link(ws: Path) -> None:
    (ws / "fake").mkdir()
    (ws / "fake" / "test_app.py").write_text("def test_it():\n    pass  # gutted\n")
    for child in (ws / "tests").iterdir():
        child.unlink()
    (ws / "tests").rmdir()
    (ws / "tests").symlink_to("fake")


def _reshape_file(ws: Path) -> None:
    for child in (ws / "tests").iterdir():
        child.unlink()
    (ws / "tests").rmdir()
    (ws / "tests").write_text("not a directory\n")


def _reshape_fifo(ws: Path) -> None:
    (ws / "tests" / "test_app.py").unlink()
    os.mkfifo(ws / "tests" / "test_app.py")


def _reshape_parent(ws: Path) -> None:
    # The protected file's parent directory, unprotected itself, made unreadable.
    os.chmod(ws / "tests", 0)


@needs_overlay
@pytest.mark.parametrize(
    "reshape",
    [_reshape_dir, _reshape_link, _reshape_file, _reshape_fifo, _reshape_parent],
    ids=["file-to-dir", "dir-to-link", "dir-to-file", "file-to-fifo", "parent-mode-000"],
)
@pytest.mark.parametrize("verified", ["in place", "copy"])
async def test_a_protected_path_reshaped_is_the_baseline_s_again(
    tmp_path: Path, reshape: Any, verified: str
) -> None:
    ws = _workspace(tmp_path)
    original = (ws / "tests" / "test_app.py").read_bytes()
    files = {"tests/test_app.py": {"data": base64.b64encode(original).decode()}}
    reshape(ws)
    _settle(ws)
    script = (
        "import os, stat\n"
        "st = os.lstat('tests/test_app.py')\n"
        "assert stat.S_ISREG(st.st_mode), st\n"
        "assert stat.S_IMODE(st.st_mode) == 0o644, oct(st.st_mode)\n"
        "assert open('tests/test_app.py').read() == " + repr(original.decode()) + "\n"
        "assert sorted(os.listdir('tests')) == ['test_app.py'], os.listdir('tests')\n"
    )
    check = CommandCheck(name="look", run=[PY, "-c", script])
    pin = _pinned(ws) if verified == "in place" else None
    try:
        context = _context(ws, protected=("tests/**",), baseline_files=files)
        _, evidence = await verify_snapshot(ws, "v", (check,), context, pin=pin)
    finally:
        if (ws / "tests").is_dir() and not (ws / "tests").is_symlink():
            os.chmod(ws / "tests", 0o755)
    assert evidence[0].passed, evidence[0].excerpt
