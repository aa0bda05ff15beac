"""
The pids cgroups that bound a sandbox's process count, made, pooled and reused.

A cgroup is a directory under a ``pids`` hierarchy this process may write (cgroup
v1's ``/sys/fs/cgroup/pids``, or a delegated cgroup v2 subtree): writing a pid
into its ``cgroup.procs`` puts that process, and every process it forks, under
its ``pids.max``. Making and removing one costs the kernel work, so a released
cgroup is taken again for a later command once no process is left in it. What
is left when this process exits is removed then; what a process killed outright
left is swept by the next one that looks in the same parent.

The files are read with ``os.read`` on a descriptor: each command reads three of
them, and a pathlib read costs ten times the system call here.
"""

from __future__ import annotations

import atexit
import itertools
import os
import time
from pathlib import Path

__all__ = ("acquire", "is_empty", "join", "refused_forks", "release", "running", "sweep_dead")

_counter = itertools.count()
_swept: set[Path] = set()  # parents whose dead processes' cgroups were removed
_released: list[Path] = []  # given back, to be reused once empty (the newest last)


def _read(path: Path) -> str:
    """The text of a small kernel file (one ``read``); OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode("ascii", "replace")
    finally:
        os.close(fd)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def join(cg: Path, pid: int) -> None:
    """
    Put process ``pid`` (and what it forks from now on) in cgroup ``cg``.

    Args:
        cg: the cgroup's directory.
        pid: the process.

    Raises:
        OSError: the process is gone, or the cgroup refused it.
    """
    _write(cg / "cgroup.procs", str(pid))


def _parents() -> list[Path]:
    parents: list[Path] = [Path("/sys/fs/cgroup/pids")]  # cgroup v1
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):  # cgroup v2: usable only when delegated
                rel = line[3:].lstrip("/")
                parents += [Path("/sys/fs/cgroup") / rel, Path("/sys/fs/cgroup/unified") / rel]
    except OSError:
        pass
    return parents


def is_empty(cg: Path) -> bool:
    """
    Tell whether cgroup ``cg`` holds no process (False when it cannot be read).

    Args:
        cg: the cgroup's directory.
    """
    try:
        return _read(cg / "pids.current").strip() == "0"
    except OSError:
        return False


def running(cg: Path) -> bool:
    """
    Tell whether a process of cgroup ``cg`` still runs (zombies run no code: they do not).

    Args:
        cg: the cgroup's directory.
    """
    try:
        pids = _read(cg / "cgroup.procs").split()
    except OSError:
        return False
    for pid in pids:
        try:
            stat = _read(Path(f"/proc/{pid}/stat"))
        except OSError:
            continue
        if stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X"):
            return True
    return False


def _rmdir(cg: Path) -> bool:
    try:
        cg.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def acquire(limit: int) -> Path | None:
    """
    Return a pids cgroup with ``pids.max = limit``, or None when none can be made.

    A released one is taken once it is empty (told here, not at its release: one
    read a command); else one is made.

    Args:
        limit: the processes (and threads) it may hold.
    """
    for cg in list(reversed(_released)):
        if not is_empty(cg):
            continue
        _released.remove(cg)
        try:
            _write(cg / "pids.max", str(limit))
        except OSError:
            if not _rmdir(cg):
                _released.insert(0, cg)
            continue
        return cg
    # A random part too: a process that died leaves its cgroups behind, and a later
    # process given the same pid would find its names taken (and no process limit).
    name = f"proctor-sandbox-{os.getpid()}-{next(_counter)}-{os.urandom(4).hex()}"
    for parent in _parents():
        if not (parent / "cgroup.procs").exists():
            continue
        if parent not in _swept:
            _swept.add(parent)
            sweep_dead(parent)
        cg = parent / name
        try:
            cg.mkdir()
        except OSError:
            continue
        try:
            _write(cg / "pids.max", str(limit))
        except OSError:
            _rmdir(cg)
            continue
        return cg
    return None


def sweep_dead(parent: Path) -> int:
    """
    Remove the empty pids cgroups that processes now gone left in ``parent`` (a host
    killed with SIGKILL runs no cleanup); return how many. A cgroup is a directory
    the kernel keeps until someone removes it: thousands pile up otherwise.

    Only a name of this module's shape whose process is gone, and only when empty
    (the kernel refuses to remove a cgroup with a process in it).

    Args:
        parent: the directory the cgroups were made in.
    """
    removed = 0
    try:
        names = [entry.name for entry in os.scandir(parent) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["proctor", "sandbox"] or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if pid == os.getpid() or _pid_exists(pid):
            continue  # its own pool, or a live process's (or one given that pid since)
        if _rmdir(parent / name):
            removed += 1
    return removed


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release(cg: Path) -> None:
    """
    Give cgroup ``cg`` back, for :func:`acquire` to reuse once no process is left in it.

    Args:
        cg: a cgroup :func:`acquire` returned.
    """
    _released.append(cg)


@atexit.register
def _cleanup() -> None:
    for cg in _released:
        for _ in range(20):
            if _rmdir(cg):
                break
            time.sleep(0.01)
    _released.clear()


def refused_forks(cg: Path) -> int:
    """
    Return how many forks cgroup ``cg`` has refused for its ``pids.max`` (0 when unknown).

    Args:
        cg: the cgroup's directory.
    """
    try:
        for line in _read(cg / "pids.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
    except (OSError, ValueError):
        pass
    return 0
