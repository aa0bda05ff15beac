"""The sandbox around commands: what a command can see, change, reach, spawn and leave behind."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor._errors import ConfigError, SandboxUnavailableError
from proctor.runtime._records import ToolStatus
from proctor.runtime._tools import cgroups, process
from proctor.runtime._tools import sandbox as sb
from proctor.runtime._tools.process import run_command

pytestmark = pytest.mark.skipif(
    sb.sandbox_available() is not None, reason=str(sb.sandbox_available())
)

PY = sys.executable


@attrs.frozen
class Ran:
    exit_code: int | None
    output: str
    status: ToolStatus
    sandboxed: bool

    @property
    def truncated(self) -> bool:
        return "bytes of output omitted" in self.output


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


# How run() launches: a sandbox made for the command (no process groups), or the
# command handed to a sandbox made ahead, as a run's commands are.
_prestarted = False


@pytest.fixture(autouse=True, params=["made-for-the-command", "prestarted"])
def launcher(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test of the module, with both ways a sandboxed command is launched."""
    global _prestarted  # run() reads it; one test at a time
    _prestarted = request.param == "prestarted"
    try:
        yield str(request.param)
    finally:
        _prestarted = False


def spec_for(ws: Path, **kw: Any) -> sb.SandboxSpec:
    kw.setdefault("ro_binds", sb.python_binds(PY))
    return sb.SandboxSpec(writable=ws, **kw)


async def run(
    argv: list[str],
    spec: sb.SandboxSpec,
    cwd: Path,
    *,
    time_limit: float = 60.0,
    limit: int = 64_000,
) -> Ran:
    groups = process.ProcessGroups(prestart=True) if _prestarted else None
    try:
        done = await run_command(
            argv, cwd=cwd, time_limit=time_limit, sandbox=spec, output_limit=limit, groups=groups
        )
    finally:
        if groups is not None:
            await groups.terminate_all()  # and the next command's sandbox, made meanwhile
    return Ran(done.exit_code, done.output, done.status, spec.mode == "auto")


async def sh(script: str, ws: Path, **kw: Any) -> Ran:
    return await run(["sh", "-c", script], spec_for(ws, **kw), ws)


def pids_with(token: str) -> list[int]:
    """The host pids whose command line holds ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


# --------------------------------------------------------------------------- basics


def test_availability_is_probed_once() -> None:
    assert sb.sandbox_available() is None
    assert sb.sandbox_available() is sb.sandbox_available()


async def test_exit_code_and_output(ws: Path) -> None:
    r = await sh("echo out; echo err >&2; exit 3", ws)
    assert r.exit_code == 3
    assert r.status is ToolStatus.ERROR
    assert r.output == "out\nerr\n"


async def test_the_hostname_is_not_the_hosts(ws: Path) -> None:
    r = await sh("cat /etc/hostname; hostname; cat /proc/sys/kernel/hostname", ws)
    assert r.output.split() == ["sandbox", "sandbox", "sandbox"]
    assert socket.gethostname() == "sandbox" or socket.gethostname() not in r.output


async def test_the_environment_is_an_allowlist(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SECRET_API_KEY", "sk-leak")
    monkeypatch.setenv("PGPASSWORD", "hunter2")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("TASK_VAR", "from-host")
    r = await sh("env", ws, env={"DECLARED": "1"}, pass_env=["TASK_VAR"])
    env = dict(line.split("=", 1) for line in r.output.splitlines() if "=" in line)
    assert "sk-leak" not in r.output
    assert "hunter2" not in r.output
    assert env["HOME"] == sb.SANDBOX_HOME
    assert env["DECLARED"] == "1"
    assert env["TASK_VAR"] == "from-host"
    assert env["TZ"] == "UTC"
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "DECLARED", "TASK_VAR", "PWD"}
    assert set(env) <= allowed


async def test_the_launcher_carries_the_marker_but_the_command_does_not(ws: Path) -> None:
    done = await run_command(
        "env", cwd=ws, time_limit=30, env={"PROCTOR_RUN": "r1"}, sandbox=spec_for(ws)
    )
    assert "PROCTOR_RUN" not in done.output


async def test_host_directories_are_invisible(ws: Path) -> None:
    # The interpreter's own roots (a checkout's virtual environment, say) are the
    # only host paths outside the system directories a command may see, and of
    # each only the path down to the interpreter.
    system = {"bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "tmp", "usr", "var"}
    roots = [p for p in sb.python_binds(PY) if p.parts[1:]]
    tops = {p.parts[1] for p in roots} - system
    lists = "; ".join(f"echo =={t}; ls -a /{t} 2>&1" for t in sorted(tops))
    r = await sh(
        f"ls /; {lists}; echo ==; ls -a /work /root 2>&1; echo ==; ls /home /opt /srv 2>&1;"
        " cat /etc/shadow; ls /etc/ssh",
        ws,
    )
    top, *inner, work_root, rest = r.output.split("==")
    assert set(top.split()) <= system | tops | {"root", "work"}
    for listing in inner:
        name, _, shown = listing.partition("\n")
        below = {p.parts[2] for p in roots if p.parts[1] == name and len(p.parts) > 2}
        assert set(shown.split()) - {".", ".."} <= below, (name, shown)
    assert ".bashrc" not in work_root
    assert ".ssh" not in work_root
    if "work" not in tops:
        assert "main" not in work_root
    assert rest.count("No such file") >= 3
    assert (await sh("cat /etc/shadow /etc/gshadow", ws)).output == ""


async def test_only_the_workspace_and_a_private_tmp_are_writable(ws: Path) -> None:
    marker = f"/tmp/sandbox-private-{uuid.uuid4().hex}"
    r = await sh(
        f"echo x > {marker} && cat {marker} && echo ok > ws_file && "
        "( touch /usr/evil 2>/dev/null || echo usr-ro ) && "
        "( touch /evil 2>/dev/null || echo root-ro ) && "
        "( touch /etc/evil 2>/dev/null || echo etc-ro ) && ( touch $HOME/h && echo home-ok )",
        ws,
    )
    assert r.exit_code == 0, r.output
    for word in ("usr-ro", "root-ro", "etc-ro", "home-ok"):
        assert word in r.output
    assert (ws / "ws_file").read_text() == "ok\n"
    assert not await anyio.Path(marker).exists()
    assert "gone" in (await sh(f"cat {marker} 2>/dev/null || echo gone", ws)).output


async def test_a_workspace_under_tmp_is_visible(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp")
    ws = tmp_path / "w"
    ws.mkdir()
    (ws / "f").write_text("hi")
    assert (await sh("cat f", ws)).output == "hi"


async def test_the_writable_directory_can_be_bound_elsewhere(tmp_path: Path) -> None:
    copy, workspace = tmp_path / "copy", tmp_path / "workspace"
    copy.mkdir()
    workspace.mkdir()
    (copy / "f").write_text("the copy")
    spec = spec_for(copy, mount_at=workspace)
    r = await run(["sh", "-c", "pwd; cat f; echo new > g"], spec, workspace)
    assert r.output == f"{workspace}\nthe copy"
    assert (copy / "g").read_text() == "new\n"
    assert not (workspace / "g").exists()


# --------------------------------------------------------------------------- hiding


async def test_a_hidden_journal_shows_empty(ws: Path) -> None:
    db = ws / "proctor.db"
    for p in sb.sqlite_sidecars(db)[:3]:
        p.write_text("SECRET-" + p.name)
    r = await sh("cat proctor.db proctor.db-wal proctor.db-shm; ls", ws, hide=[db])
    assert "SECRET" not in r.output
    assert db.read_text() == "SECRET-proctor.db"
    assert not (ws / "proctor.db-journal").exists()  # no placeholder left behind


async def test_a_hidden_directory_and_a_link_to_it(ws: Path) -> None:
    state = ws / ".proctor"
    state.mkdir()
    (state / "journal.db").write_text("SECRET")
    (ws / "link").symlink_to(state / "journal.db")
    r = await sh(
        "cat .proctor/journal.db link; touch .proctor/x 2>/dev/null || echo ro", ws, hide=[state]
    )
    assert "SECRET" not in r.output
    assert "ro" in r.output


async def test_hiding_inside_a_read_only_bind(ws: Path, tmp_path: Path) -> None:
    other = tmp_path / "venv"
    other.mkdir()
    (other / "secret.txt").write_text("SECRET")
    (other / "ok.txt").write_text("visible")
    binds = [*sb.python_binds(PY), other]
    r = await sh(
        f"cat {other}/secret.txt {other}/ok.txt", ws, ro_binds=binds, hide=[other / "secret.txt"]
    )
    assert "SECRET" not in r.output
    assert "visible" in r.output


async def test_links_reach_only_what_is_visible(ws: Path, tmp_path: Path) -> None:
    (ws / "pw").symlink_to("/etc/passwd")
    assert (await sh("cat pw", ws)).output.startswith("root:x:0:0:root:/tmp/home")
    secret = tmp_path / "outside.txt"
    secret.write_text("SECRET")
    (ws / "l").symlink_to(secret)
    r = await sh("cat l 2>&1; ln ../outside.txt h 2>&1; ln /etc/passwd p 2>&1", ws)
    assert "SECRET" not in r.output
    assert "No such file" in r.output
    assert not (ws / "p").exists()


async def test_a_live_wal_journal_stays_hidden(ws: Path) -> None:
    db = ws / "proctor.db"
    con = sqlite3.connect(db)
    con.execute("pragma journal_mode=wal")
    con.execute("create table t(x)")
    con.execute("insert into t values ('SECRET-ROW')")
    con.commit()
    code = (
        "import sqlite3\n"
        "print(open('proctor.db','rb').read(), open('proctor.db-wal','rb').read())\n"
        "c = sqlite3.connect('proctor.db')\n"
        "print(c.execute('select name from sqlite_master').fetchall())\n"
    )
    r = await run([PY, "-c", code], spec_for(ws, hide=[db]), ws)
    assert "SECRET" not in r.output, r.output
    assert "[]" in r.output, r.output
    con.execute("insert into t values ('after')")
    con.commit()
    assert con.execute("select count(*) from t").fetchone() == (2,)
    con.close()


# --------------------------------------------------------------------------- network


@pytest.fixture
def tcp_server() -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.sendall(b"hello-from-host")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


CONNECT = (
    "import socket,sys\n"
    "try:\n"
    "    s=socket.create_connection(('127.0.0.1',int(sys.argv[1])),timeout=5)\n"
    "    print(s.recv(100).decode())\n"
    "except OSError as e:\n"
    "    print('connect failed', e); sys.exit(1)\n"
)


async def test_no_network_means_not_even_the_hosts_loopback(ws: Path, tcp_server: int) -> None:
    r = await run([PY, "-c", CONNECT, str(tcp_server)], spec_for(ws), ws)
    assert r.exit_code == 1
    assert "connect failed" in r.output


async def test_the_host_network_when_asked(ws: Path, tcp_server: int) -> None:
    r = await run([PY, "-c", CONNECT, str(tcp_server)], spec_for(ws, network="host"), ws)
    assert r.exit_code == 0, r.output
    assert "hello-from-host" in r.output, r.output


# --------------------------------------------------------------------------- lifetime

# Each child records that it runs (once detached); the parent waits for that and
# exits. Once no process holds the token, nothing can ever write the marker.
CHILD = "sh -c 'echo $$ > {s}; sleep 1; echo late > {m}' {tok}"
SURVIVORS = {
    "setsid": "setsid -f " + CHILD,
    "nohup": "nohup " + CHILD + " >/dev/null 2>&1 &",
    "double_fork": "( ( " + CHILD + " & ) & )",
    "background": CHILD + " &",
    "python_daemon": (
        PY + ' -c "import os,time,sys\nif os.fork(): sys.exit()\nos.setsid()\n'
        "if os.fork(): sys.exit()\nopen(sys.argv[2],'w').write('x')\n"
        "time.sleep(1); open(sys.argv[1],'w').write('late')\" {m} {s} {tok}"
    ),
}
WAIT_STARTED = "\nwhile [ ! -s {s} ]; do sleep 0.01; done; echo started"


def survivor_script(kind: str, ws: Path, token: str) -> str:
    fmt = {"m": ws / "marker", "s": ws / "started", "tok": token}
    return SURVIVORS[kind].format(**fmt) + WAIT_STARTED.format(**fmt)


@pytest.mark.parametrize("kind", sorted(SURVIVORS))
async def test_detached_children_die_with_the_command(ws: Path, kind: str) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    r = await sh(survivor_script(kind, ws, token), ws)
    assert r.exit_code == 0, r.output
    assert "started" in r.output, r.output
    assert (ws / "started").exists()  # the child ran, detached
    assert pids_with(token) == []  # the PID namespace is gone with its init
    assert not (ws / "marker").exists()


async def test_the_positive_control_unsandboxed(ws: Path) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    spec = sb.SandboxSpec(writable=ws, mode="off")
    started = ws / "started"
    script = (
        f"setsid -f sh -c 'echo $$ > {started}; sleep 30; : {token}' >/dev/null 2>&1"
        + WAIT_STARTED.format(s=started)
    )
    r = await run(["sh", "-c", script], spec, ws)
    assert r.exit_code == 0
    survivors = pids_with(token)
    assert survivors, "the control child should still be alive"
    for pid in survivors:
        os.kill(pid, 9)


async def test_the_time_limit_kills_the_whole_sandbox(ws: Path) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    r = await run(
        ["sh", "-c", f"setsid -f sh -c 'sleep 30' {token}; sleep 30"],
        spec_for(ws),
        ws,
        time_limit=1,
    )
    assert r.status is ToolStatus.UNCERTAIN
    assert pids_with(token) == []


# --------------------------------------------------------------------------- limits

# The limits hold with the sandbox off too (the rlimits and the pids cgroup); each
# limit test runs in both modes, each mode both ways it is launched.


@pytest.fixture(params=["auto", "off"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def killed_by(r: Ran, signum: int) -> bool:
    """Whether the command died of ``signum`` (bubblewrap reports it as 128+N)."""
    return r.exit_code == (128 + signum if r.sandboxed else -signum)


async def test_a_fork_bomb_is_bounded(ws: Path, mode: str) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    r = await sh(
        f"i=0; while [ $i -lt 300 ]; do (sleep 30; : {token}) & i=$((i+1)); done 2>/dev/null;"
        " echo spawned",
        ws,
        max_processes=32,
        mode=mode,
    )
    # The shell itself cannot fork any more and gives up; the note says why.
    assert "process limit reached" in r.output or os.getuid() != 0
    assert pids_with(token) == []


async def test_the_process_limit_counts(ws: Path, mode: str) -> None:
    code = (
        "import os,time\nn=0\n"
        "for i in range(100):\n"
        "    try:\n        pid=os.fork()\n    except OSError:\n        break\n"
        "    if pid==0:\n        time.sleep(3); os._exit(0)\n    n+=1\n"
        "print('forked',n)\n"
    )
    r = await run([PY, "-c", code], spec_for(ws, max_processes=20, mode=mode), ws)
    assert int(r.output.split()[1]) < 20, r.output


@pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/pids", os.W_OK),
    reason="needs a writable cgroup-v1 pids hierarchy",
)
def test_a_dead_process_s_cgroups_do_not_take_the_process_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A process that died left proctor-sandbox-<pid>-0; this process now has that pid.
    monkeypatch.setattr(cgroups, "_released", [])
    monkeypatch.setattr(cgroups, "_counter", itertools.count())
    left = Path(f"/sys/fs/cgroup/pids/proctor-sandbox-{os.getpid()}-0")
    left.mkdir(exist_ok=True)
    try:
        cg = cgroups.acquire(7)
        assert cg is not None
        assert cg != left
        assert (cg / "pids.max").read_text().strip() == "7"
        cg.rmdir()
    finally:
        left.rmdir()


@pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/pids", os.W_OK),
    reason="needs a writable cgroup-v1 pids hierarchy",
)
def test_a_released_cgroup_is_reused_only_once_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "_released", [])
    made: list[Path] = []
    holder = subprocess.Popen(["sleep", "60"])
    try:
        held = cgroups.acquire(5)
        assert held is not None
        made.append(held)
        cgroups.join(held, holder.pid)
        cgroups.release(held)  # a process is still in it
        other = cgroups.acquire(9)
        assert other is not None
        made.append(other)
        assert other != held
        assert (other / "pids.max").read_text().strip() == "9"
        cgroups.release(other)
        holder.kill()
        holder.wait()
        again = {cgroups.acquire(7), cgroups.acquire(7)}
        assert again == {held, other}  # both empty now: neither made anew
        assert {(cg / "pids.max").read_text().strip() for cg in made} == {"7"}
    finally:
        holder.kill()
        holder.wait()
        for cg in made:
            with contextlib.suppress(OSError):
                cg.rmdir()


@pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/pids", os.W_OK),
    reason="needs a writable cgroup-v1 pids hierarchy",
)
def test_the_cgroups_of_dead_processes_are_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    parent = Path("/sys/fs/cgroup/pids")
    dead = parent / f"proctor-sandbox-{gone.pid}-0-{os.urandom(4).hex()}"
    busy = parent / f"proctor-sandbox-{gone.pid}-1-{os.urandom(4).hex()}"
    live = parent / f"proctor-sandbox-{os.getppid()}-0-{os.urandom(4).hex()}"
    other = parent / f"other-{os.urandom(4).hex()}"
    for cg in (dead, busy, live, other):
        cg.mkdir()
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (busy / "cgroup.procs").write_text(str(holder.pid))
        assert cgroups.sweep_dead(parent) >= 1
        assert not dead.exists()
        assert busy.exists()  # a process still runs in it: the kernel keeps it
        assert live.exists()  # its process lives
        assert other.exists()  # not proctor's
    finally:
        holder.kill()
        holder.wait()  # reaped: its cgroup is empty
        for cg in (dead, busy, live, other):
            with contextlib.suppress(FileNotFoundError):
                cg.rmdir()


async def test_output_is_bounded(ws: Path) -> None:
    script = "head -c 100000000 /dev/zero | tr '\\0' 'a'; echo; echo END"
    r = await run(["sh", "-c", script], spec_for(ws), ws, limit=64 * 1024)
    assert r.truncated
    assert len(r.output) < 70 * 1024
    assert r.output.startswith("aaaa")
    assert r.output.rstrip().endswith("END")


async def test_a_big_file_is_bounded(ws: Path, mode: str) -> None:
    r = await sh("exec head -c 10000000 /dev/zero > big", ws, max_file_bytes=1 << 20, mode=mode)
    assert killed_by(r, signal.SIGXFSZ), r
    assert "file size limit" in r.output
    assert (ws / "big").stat().st_size == 1 << 20
    r = await run(
        [PY, "-c", "open('big2','wb').write(b'0'*(4<<20))"],
        spec_for(ws, max_file_bytes=1 << 20, mode=mode),
        ws,
    )
    assert r.exit_code == 1
    assert "File too large" in r.output


async def test_the_memory_limit(ws: Path, mode: str) -> None:
    spec = spec_for(ws, memory_bytes=1 << 30, mode=mode)
    r = await run([PY, "-c", "b=bytearray(2<<30)"], spec, ws)
    assert r.exit_code == 1
    assert "MemoryError" in r.output


async def test_the_cpu_limit(ws: Path, mode: str) -> None:
    r = await run([PY, "-c", "while True: pass"], spec_for(ws, cpu_seconds=1, mode=mode), ws)
    assert killed_by(r, signal.SIGXCPU), r
    assert "CPU time limit" in r.output


async def test_no_core_files(ws: Path, mode: str) -> None:
    r = await sh("ulimit -c; ulimit -Hc", ws, mode=mode)
    assert r.output.split() == ["0", "0"]


async def test_the_limits_are_soft_and_hard(ws: Path, mode: str) -> None:
    # Soft and hard alike (dash's ulimit: -v in KiB, -f in 512-byte blocks, -p
    # processes), the CPU's hard limit 5 s above the soft one: none can be raised.
    spec = spec_for(
        ws, cpu_seconds=7, memory_bytes=3 << 30, max_file_bytes=5 << 20, max_processes=77, mode=mode
    )
    shown = "; ".join(f"ulimit -{f}" for f in ("St", "Ht", "Sv", "Hv", "Sf", "Hf", "Sp", "Hp"))
    script = f"{shown}; ulimit -v unlimited 2>/dev/null || echo kept"
    r = await run(["sh", "-c", script], spec, ws)
    lines = r.output.split()
    blocks = (5 << 20) // 512  # dash: 512-byte blocks
    limits = ["7", "12", str(3 << 20), str(3 << 20), str(blocks), str(blocks), "77", "77"]
    assert lines == [*limits, "kept"]


async def test_binary_output_becomes_text(ws: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(bytes(range(256))*4)"
    r = await run([PY, "-c", code], spec_for(ws), ws)
    assert r.exit_code == 0
    assert "\ufffd" in r.output


async def test_pytest_runs_inside(ws: Path) -> None:
    (ws / "test_a.py").write_text("def test_ok():\n    assert True\n")
    r = await run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"], spec_for(ws), ws)
    assert r.exit_code == 0, r.output
    assert "1 passed" in r.output, r.output


async def test_a_venv_inside_the_workspace_stays_writable(ws: Path) -> None:
    await anyio.run_process([PY, "-m", "venv", "--without-pip", str(ws / ".venv")])
    vpy = ws / ".venv/bin/python"
    binds = sb.python_binds(vpy, skip_under=[ws])
    assert all(ws not in b.parents for b in binds)
    spec = sb.SandboxSpec(writable=ws, ro_binds=binds)
    r = await run([str(vpy), "-c", "import sys; print(sys.prefix)"], spec, ws)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == str(ws / ".venv"), r.output
    assert (
        "writable" in (await run(["sh", "-c", "touch .venv/new && echo writable"], spec, ws)).output
    )


# --------------------------------------------------------------------------- wrap and the spec


def test_wrap_clears_the_environment(ws: Path) -> None:
    argv = sb.wrap(
        ["true"], spec_for(ws, network="host"), ws, host_env={"PATH": "/usr/bin", "AWS_SECRET": "x"}
    )
    assert "--share-net" in argv
    assert "--clearenv" in argv
    assert "--die-with-parent" in argv
    assert "AWS_SECRET" not in argv
    assert "x" not in argv
    assert argv[-2:] == ["--", "true"]
    assert "--share-net" not in sb.wrap(["true"], spec_for(ws), ws)
    assert sb.wrap(["true"], sb.SandboxSpec(writable=ws, mode="off"), ws)[-1] == "true"


def test_bad_specs_are_config_errors(ws: Path) -> None:
    with pytest.raises(ConfigError, match="network"):
        sb.SandboxSpec(writable=ws, network="lan")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="cpu_seconds"):
        sb.SandboxSpec(writable=ws, cpu_seconds=0)
    with pytest.raises(ConfigError, match="variable name"):
        sb.SandboxSpec(writable=ws, env={"A=B": "x"})
    with pytest.raises(ConfigError, match=r"sandbox\.mode"):
        sb.SandboxSettings.from_mapping({"mode": "of"})
    with pytest.raises(ConfigError, match=r"sandbox\.networks: unknown key"):
        sb.SandboxSettings.from_mapping({"networks": "none"})


async def test_an_unusable_sandbox_refuses(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb, "sandbox_available", lambda: "no bwrap: apt-get install bubblewrap")
    with pytest.raises(SandboxUnavailableError, match="apt-get"):
        await run(["true"], spec_for(ws), ws)


async def test_off_still_filters_the_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SECRET_API_KEY", "sk-leak")
    r = await run(["sh", "-c", "env; ulimit -v"], sb.SandboxSpec(writable=ws, mode="off"), ws)
    assert "sk-leak" not in r.output
    assert str((8 << 30) // 1024) in r.output


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=30), st.integers(min_value=2, max_value=200))
def test_capture_keeps_head_and_tail(chunks: list[bytes], limit: int) -> None:
    cap = process._Capture(limit)
    for c in chunks:
        cap.feed(c)
    data = b"".join(chunks)
    assert cap.total == len(data)
    if len(data) <= limit:
        assert cap.text() == data.decode("utf-8", "replace")
    else:
        assert bytes(cap.head) == data[: limit // 2]
        assert bytes(cap.tail) == data[len(data) - (limit - limit // 2) :]
