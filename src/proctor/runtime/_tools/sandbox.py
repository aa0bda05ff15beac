"""
The sandbox: bubblewrap around every command an actor runs and every check the verifier runs.

A sandboxed command sees an empty, read-only root with the system directories
(``/usr``, ``/bin``, ``/lib*``, ``/etc``) bound read-only, a private ``/proc``
(its own PID namespace), a minimal ``/dev``, a private ``/tmp`` (a size-bounded
tmpfs, also its ``HOME``), the paths it is given read-only (the interpreter the
checks use) and exactly one writable directory: the workspace, or for a check
its own copy of the frozen candidate, bound at the workspace's own path. Home
directories, proctor's journal, task file, actor script and snapshots are not
there at all, and what lies under a visible path is covered (``hide``).

It runs in new user, PID, network, IPC, UTS and cgroup namespaces with
``--die-with-parent``: when the command's main process exits, the kernel kills
every process left in its PID namespace, however it detached (``setsid``,
``nohup``, a double fork). Without ``network = "host"`` it has only a private
loopback. Its environment is built from :data:`ENV_ALLOWLIST` plus the names and
values the task declares; nothing else of proctor's environment reaches it.

Limits come from ``prlimit`` before ``bwrap`` (inherited by everything inside):
CPU seconds and address space per process, the largest file, no core files; and
a pids cgroup for the process count when one can be made (``RLIMIT_NPROC`` is
not enforced for root). A launcher made ahead with the sandbox off is given the
same cgroup and limits from outside while it waits (:meth:`Launch.admit`). See
``docs/security.md`` for the threat model: what this protects against and what
it does not.

:func:`launch` is the one way to start a command under a :class:`SandboxSpec`;
``run_command`` and the verifier's command checks both use it.
"""

from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import attrs

from proctor._errors import ConfigError, SandboxUnavailableError
from proctor._fs import remove_tree
from proctor.runtime._tools import cgroups

__all__ = (
    "DEFAULT_HIDDEN",
    "ENV_ALLOWLIST",
    "OVERLAY_UNSAFE",
    "PRESTART_LINE_LIMIT",
    "SANDBOX_HOME",
    "SHELL",
    "SYSTEM_DIRS",
    "Launch",
    "SandboxSettings",
    "SandboxSpec",
    "command_dir",
    "command_line",
    "launch",
    "limit_note",
    "overlay_available",
    "overlay_dirs",
    "prestart",
    "python_binds",
    "sandbox_available",
    "sandbox_env",
    "sqlite_sidecars",
    "wrap",
)

SandboxMode = Literal["auto", "off"]
Network = Literal["none", "host"]

_KIB: Final = 1024
_MIB: Final = 1024 * _KIB
_GIB: Final = 1024 * _MIB

ENV_ALLOWLIST: tuple[str, ...] = ("PATH", "LANG", "LC_ALL", "TERM", "TZ")
"""Host variables copied into a sandboxed command when set; nothing else passes."""

SANDBOX_HOME: Final = "/tmp/home"
"""The private ``HOME`` inside the sandbox (on its private ``/tmp``)."""

_DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SYSTEM_DIRS: tuple[str, ...] = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
)
"""
Host directories bound read-only (merged-``/usr`` symlinks are recreated as
symlinks). Deliberately not the whole root: ``/root``, ``/home``, ``/work``,
``/srv``, ``/var``, ``/opt``, ``/mnt`` stay invisible.
"""

DEFAULT_HIDDEN: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/machine-id",
    "/etc/subuid",
    "/etc/subgid",
)
"""Paths under ``/etc`` covered in every sandbox: credentials and host identity."""

_SQLITE_SUFFIXES: Final = ("-wal", "-shm", "-journal")


def _to_path(value: str | os.PathLike[str]) -> Path:
    return Path(value)


def _to_optional_path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


def _to_paths(values: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    if isinstance(values, str | os.PathLike):
        return (Path(values),)
    return tuple(Path(v) for v in values)


def _to_env(values: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    items = values.items() if isinstance(values, Mapping) else values
    pairs = tuple(sorted((str(k), str(v)) for k, v in items))
    for key, value in pairs:
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ConfigError(
                f"sandbox: {key!r} is not a usable environment variable name (or its value"
                " holds a NUL byte); give names of letters, digits and underscores"
            )
    return pairs


def _to_names(values: Iterable[str]) -> tuple[str, ...]:
    return (values,) if isinstance(values, str) else tuple(values)


def _positive(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"sandbox: {attribute.name} must be a whole number > 0, not {value!r}")


def _one_of(*allowed: str) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in allowed:
            raise ConfigError(
                f"sandbox: {attribute.name} must be one of {', '.join(map(repr, allowed))},"
                f" not {value!r}"
            )

    return check


@attrs.frozen
class SandboxSpec:
    """
    What a sandboxed command can see and use.

    Args:
        writable: the one host directory the command may change (the workspace,
            or a check's copy of the candidate).
        mount_at: where ``writable`` appears inside the sandbox (default: its own
            path). A check's copy is bound at the workspace's path, so nothing in
            the paths tells the program it is being verified.
        mode: ``auto`` (bubblewrap; refuse when it cannot be used) or ``off``
            (on the host: the environment allowlist, a private ``HOME``, the
            rlimits and the pids cgroup still apply, nothing else does).
        network: ``none`` (a private loopback only) or ``host``.
        ro_binds: more host paths visible read-only at their own path.
        extra_writable: more host directories writable at their own path.
        hide: host paths covered by an empty file or directory, even inside
            ``writable`` or a read-only bind; a file's SQLite ``-wal``, ``-shm``
            and ``-journal`` siblings are covered too.
        env: variables set to these values.
        pass_env: names of variables copied from the host when set.
        cpu_seconds: CPU seconds per process (SIGXCPU, then SIGKILL 5 s later).
        memory_bytes: address space per process.
        max_processes: processes (and threads) of the whole sandbox.
        max_file_bytes: the largest file a process may write.
        tmp_bytes: the size of the private ``/tmp``.
        use_cgroup: bound ``max_processes`` with a pids cgroup when one can be made.
        system_dirs: host directories bound read-only.
        default_hidden: paths always covered.
        lower: a directory seen read-only beneath ``writable`` (an overlay:
            ``writable`` is its upper directory and receives every write, the
            union appears at ``mount_at``); only where :func:`overlay_available`.

    Raises:
        ConfigError: a limit that is not a whole number > 0, an unknown mode or
            network, a bad environment variable name.
    """

    writable: Path = attrs.field(converter=_to_path)
    mount_at: Path | None = attrs.field(default=None, converter=_to_optional_path)
    mode: SandboxMode = attrs.field(default="auto", validator=_one_of("auto", "off"))
    network: Network = attrs.field(default="none", validator=_one_of("none", "host"))
    ro_binds: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    extra_writable: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    hide: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_to_env)
    pass_env: tuple[str, ...] = attrs.field(default=(), converter=_to_names)
    cpu_seconds: int = attrs.field(default=600, validator=_positive)
    memory_bytes: int = attrs.field(default=8 * _GIB, validator=_positive)
    max_processes: int = attrs.field(default=512, validator=_positive)
    max_file_bytes: int = attrs.field(default=512 * _MIB, validator=_positive)
    tmp_bytes: int = attrs.field(default=1 * _GIB, validator=_positive)
    use_cgroup: bool = True
    system_dirs: tuple[str, ...] = attrs.field(default=SYSTEM_DIRS, converter=_to_names)
    default_hidden: tuple[str, ...] = attrs.field(default=DEFAULT_HIDDEN, converter=_to_names)
    lower: Path | None = attrs.field(default=None, converter=_to_optional_path)

    @functools.cached_property
    def inside(self) -> Path:
        """Where the writable directory is seen from inside the sandbox (resolved once)."""
        return Path(os.path.realpath(self.mount_at if self.mount_at is not None else self.writable))

    @functools.cached_property
    def host_dir(self) -> Path:
        """The writable directory, its symbolic links resolved (once)."""
        return Path(os.path.realpath(self.writable))


# --------------------------------------------------------------------------- availability


@functools.cache
def sandbox_available() -> str | None:
    """
    Return None when bubblewrap can make a sandbox here, else the reason and the fix.

    The first call runs one probe sandbox (a few milliseconds, blocking); the
    answer is cached (``sandbox_available.cache_clear()`` probes again).
    """
    if shutil.which("bwrap") is None:
        return (
            "bubblewrap (bwrap) is not installed: apt-get install bubblewrap (Debian, Ubuntu),"
            " dnf install bubblewrap (Fedora), apk add bubblewrap (Alpine); or set [sandbox]"
            ' mode = "off" to run commands on the host'
        )
    if shutil.which("prlimit") is None:
        return "prlimit (resource limits) is not installed: apt-get install util-linux"
    with tempfile.TemporaryDirectory(prefix="proctor-probe-") as tmp:
        spec = SandboxSpec(writable=tmp, use_cgroup=False)
        argv = wrap(["/bin/sh", "-c", "exit 0"], spec, tmp)
        try:
            probe = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={},
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the bubblewrap probe could not run: {exc}"
        if probe.returncode == 0:
            return None
        detail = probe.stdout.decode("utf-8", "replace").strip() or f"exit {probe.returncode}"
    return f"bubblewrap cannot make a sandbox here ({detail}). {_userns_hint()}"


OVERLAY_UNSAFE: Final = frozenset(',:\\\n"')
"""Characters an overlay's paths may not hold (its mount options cannot escape them)."""

# Mounts the overlay in a private mount namespace, then becomes the sandbox
# launcher: $0 the mount point, $1 the options, the rest bubblewrap's argv.
_OVERLAY_MOUNT: Final = 'mount -t overlay overlay -o "$1" "$0" || exit 125; shift; exec "$@"'
_UNSHARE: Final = ("--mount", "--propagation", "private", "--", "/bin/sh", "-c")


def overlay_dirs(upper: Path) -> tuple[Path, Path]:
    """The overlay's work directory and mount point for the upper directory ``upper``."""
    return upper.with_name(upper.name + ".work"), upper.with_name(upper.name + ".merged")


def _overlay_prefix(lower: Path, upper: Path) -> list[str]:
    work, merged = overlay_dirs(upper)
    # redirect_dir: a lower directory renames as in a copy; only root sets redirects.
    options = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=on"
    return [shutil.which("unshare") or "unshare", *_UNSHARE, _OVERLAY_MOUNT, str(merged), options]


@functools.cache
def overlay_available() -> str | None:
    """
    Return None when a check's sandbox can see the workspace through an overlay
    (:attr:`SandboxSpec.lower`), else why not: it needs root, ``unshare`` and
    ``mount``. The first call mounts one with a whiteout (milliseconds); cached.
    """
    if os.geteuid() != 0:
        return "the overlay needs root (checks then run on a copy of the candidate)"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare and mount (util-linux) are not installed"
    if sandbox_available() is not None:
        return "bubblewrap cannot make a sandbox here"
    with tempfile.TemporaryDirectory(prefix="proctor-probe-") as tmp:
        lower, upper = Path(tmp, "lower"), Path(tmp, "upper")
        for made in (lower, upper, *overlay_dirs(upper)):
            made.mkdir()
        (lower / "kept").write_bytes(b"")
        (lower / "hidden").write_bytes(b"")
        look = 'test -e "$0/kept" && ! test -e "$0/hidden" && : > "$0/new"'
        try:
            os.mknod(upper / "hidden", 0o20600, os.makedev(0, 0))
            probe = subprocess.run(
                [
                    *_overlay_prefix(lower, upper),
                    "/bin/sh",
                    "-c",
                    look,
                    str(overlay_dirs(upper)[1]),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={"PATH": _DEFAULT_PATH},
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the overlay probe could not run: {exc}"
        if probe.returncode != 0 or (lower / "new").exists() or not (upper / "new").exists():
            detail = probe.stdout.decode("utf-8", "replace").strip() or f"exit {probe.returncode}"
            return f"an overlay cannot be mounted here ({detail})"
    return None


def _read_sysctl(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _userns_hint() -> str:
    if _read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "Unprivileged user namespaces are off: sysctl -w kernel.unprivileged_userns_clone=1"
    if _read_sysctl("/proc/sys/user/max_user_namespaces") == "0":
        return "User namespaces are off: sysctl -w user.max_user_namespaces=15000"
    if _read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor restricts unprivileged user namespaces: install an AppArmor profile for"
            " bwrap, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
        )
    return (
        "In Docker or Podman the default seccomp profile blocks namespaces: run the container"
        " with --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or set"
        ' [sandbox] mode = "off" to run commands on the host'
    )


# --------------------------------------------------------------------------- helpers


def sqlite_sidecars(path: str | os.PathLike[str]) -> tuple[Path, ...]:
    """
    Return ``path`` and the files SQLite keeps next to it.

    Args:
        path: a SQLite database file.
    """
    p = Path(path)
    return (p, *(p.with_name(p.name + suffix) for suffix in _SQLITE_SUFFIXES))


def _is_under(path: Path, root: Path) -> bool:
    # On the strings: ``root in path.parents`` builds every parent (a launch asks this
    # hundreds of times). Both are absolute and normalized, as pathlib keeps them.
    if path == root:
        return True
    top = str(root)
    return str(path).startswith(top if top.endswith("/") else top + "/")


def _prefix_of(bindir: Path) -> Path:
    return bindir.parent if bindir.name == "bin" else bindir


def python_binds(
    python: str | os.PathLike[str], *, skip_under: Iterable[str | os.PathLike[str]] = ()
) -> tuple[Path, ...]:
    """
    Return the read-only paths an interpreter (or a virtual environment's python) needs.

    For a virtual environment: the environment and the base installation its
    ``pyvenv.cfg`` names, since its ``bin/python`` is a link or a copy that loads
    the standard library from there. Paths under the system directories or under
    ``skip_under`` are left out.

    Args:
        python: the interpreter.
        skip_under: directories whose paths are dropped (the workspace, so that a
            virtual environment inside it stays writable).
    """
    exe = Path(os.path.abspath(python))
    found: list[Path] = []
    venv = exe.parent.parent
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        found.append(venv)
        for line in cfg.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home":
                found.append(_prefix_of(Path(value.strip())))
    found.append(_prefix_of(Path(os.path.realpath(exe)).parent))
    skip = [Path(os.path.realpath(s)) for s in skip_under]
    result: list[Path] = []
    for p in found:
        real = Path(os.path.realpath(p))
        if any(_is_under(real, Path(d)) for d in SYSTEM_DIRS) or any(
            _is_under(real, s) for s in skip
        ):
            continue
        if real not in result:
            result.append(real)
    return tuple(result)


_support_dir: Path | None = None


def _support_files() -> Path:
    """Return the directory with the synthetic ``/etc`` files and the empty covers."""
    global _support_dir  # one directory per process, made on first use
    existing = _support_dir
    if existing is not None and (existing / "empty.d").is_dir():
        return existing
    made = Path(tempfile.mkdtemp(prefix="proctor-sandbox-etc-"))
    made.chmod(0o755)
    uid, gid = os.getuid(), os.getgid()
    users = {0: "root", 65534: "nobody"}
    users.setdefault(uid, "sandbox")
    groups = {0: "root", 65534: "nogroup"}
    groups.setdefault(gid, "sandbox")
    files = {
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "passwd": "".join(
            f"{name}:x:{u}:{u if u in groups else 65534}:{name}:{SANDBOX_HOME}:/bin/sh\n"
            for u, name in sorted(users.items())
        ),
        "group": "".join(f"{name}:x:{g}:\n" for g, name in sorted(groups.items())),
    }
    for name, text in files.items():
        (made / name).write_text(text)
        (made / name).chmod(0o644)
    (made / "empty").write_text("")
    (made / "empty").chmod(0o444)
    (made / "empty.d").mkdir(mode=0o555)
    _support_dir = made
    atexit.register(shutil.rmtree, made, True)
    return made


def sandbox_env(spec: SandboxSpec, host_env: Mapping[str, str]) -> dict[str, str]:
    """
    Return the environment a command gets: the allowlist, the declared names and values.

    Args:
        spec: the sandbox.
        host_env: the host's environment, where allowed names are copied from.
    """
    env: dict[str, str] = {}
    for name in (*ENV_ALLOWLIST, *spec.pass_env):
        value = host_env.get(name)
        if value is not None:
            env[name] = value
    env.setdefault("PATH", _DEFAULT_PATH)
    env["HOME"] = SANDBOX_HOME
    env.update(dict(spec.env))
    return env


def _rlimits(spec: SandboxSpec) -> tuple[tuple[str, int, int, int], ...]:
    """The limits every process of a command gets: ``(prlimit's name, resource, soft, hard)``."""
    return (
        ("cpu", resource.RLIMIT_CPU, spec.cpu_seconds, spec.cpu_seconds + 5),
        ("as", resource.RLIMIT_AS, spec.memory_bytes, spec.memory_bytes),
        ("fsize", resource.RLIMIT_FSIZE, spec.max_file_bytes, spec.max_file_bytes),
        ("nproc", resource.RLIMIT_NPROC, spec.max_processes, spec.max_processes),
        ("core", resource.RLIMIT_CORE, 0, 0),
    )


def _limit_argv(spec: SandboxSpec) -> list[str]:
    limits = [f"--{name}={soft}:{hard}" for name, _, soft, hard in _rlimits(spec)]
    return [shutil.which("prlimit") or "prlimit", *limits, "--"]


def wrap(
    argv: Sequence[str],
    spec: SandboxSpec,
    cwd: str | os.PathLike[str],
    host_env: Mapping[str, str] | None = None,
) -> list[str]:
    """
    Return the argv that runs ``argv`` under ``spec`` in ``cwd`` (a path inside the sandbox).

    ``[prlimit ... --, bwrap ... --, *argv]``; with mode ``off`` only
    ``[prlimit ... --, *argv]`` (the caller passes the filtered environment).

    Args:
        argv: the command.
        spec: the sandbox.
        cwd: the working directory as seen inside.
        host_env: where allowed variables are copied from (default: this process's).

    Raises:
        ConfigError: an empty command, or a writable directory that does not exist.
    """
    # Kept whole: one ordered argv, and the order is the boundary (binds parents first,
    # covers after every bind, the root read-only last).
    if not argv:
        raise ConfigError("sandbox: an empty command; give a program to run")
    limits = _limit_argv(spec)
    if spec.mode == "off":
        if spec.lower is not None:
            raise ConfigError("sandbox: an overlay (lower) needs mode auto; give a copy")
        return [*limits, *argv]
    env = sandbox_env(spec, os.environ if host_env is None else host_env)
    writable = spec.host_dir
    if not writable.is_dir():
        raise ConfigError(f"sandbox: the writable directory {writable} does not exist")
    inside = spec.inside
    source, shown, prefix = writable, writable, []
    if spec.lower is not None:
        shown = Path(os.path.realpath(spec.lower))
        if OVERLAY_UNSAFE.intersection(f"{shown}{writable}"):
            raise ConfigError(f'sandbox: overlay paths may not hold , : \\ " or newline: {shown}')
        prefix = _overlay_prefix(shown, writable)
        source = overlay_dirs(writable)[1]
    b: list[str] = [shutil.which("bwrap") or "bwrap"]
    b += ["--unshare-all", "--unshare-user", "--disable-userns"]
    if spec.network == "host":
        b.append("--share-net")
    b += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    # 1. System directories, read-only; merged-/usr symlinks as symlinks.
    visible: list[Path] = []
    for d in spec.system_dirs:
        p = Path(d)
        if p.is_symlink():
            b += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            b += ["--ro-bind", str(p), str(p)]
            visible.append(p)
    etc = _support_files()
    if Path("/etc") in visible:
        for name in ("hostname", "hosts", "passwd", "group"):
            if Path("/etc", name).exists():
                b += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    # 2. Kernel file systems, a private /tmp and HOME.
    b += ["--proc", "/proc", "--dev", "/dev"]
    b += ["--size", str(spec.tmp_bytes), "--tmpfs", "/tmp", "--dir", SANDBOX_HOME]
    b += ["--symlink", "/tmp", "/var/tmp"]
    # 3. Read-only binds and the writable directories, parents first, so that a
    #    bind inside another layers on top of it.
    binds: list[tuple[Path, Path, bool]] = [
        (Path(os.path.realpath(p)), Path(os.path.realpath(p)), False)
        for p in spec.ro_binds
        if os.path.exists(p)
    ]
    binds.append((source, inside, True))
    for extra in spec.extra_writable:
        real = Path(os.path.realpath(extra))
        binds.append((real, real, True))
    for source, target, rw in sorted(binds, key=lambda t: len(t[1].parts)):
        b += ["--bind" if rw else "--ro-bind", str(source), str(target)]
        visible.append(target)
    # 4. Hidden paths, after every bind, so they win even inside the workspace.
    b += _hide_args(spec, visible, shown, inside)
    # 5. The root read-only: writes outside the writable directories fail.
    b += ["--remount-ro", "/", "--clearenv"]
    for key, value in sorted(env.items()):
        b += ["--setenv", key, value]
    b += ["--chdir", os.fspath(cwd), "--"]
    return [*limits, *prefix, *b, *argv]


def _hide_args(spec: SandboxSpec, visible: list[Path], writable: Path, inside: Path) -> list[str]:
    wanted: list[Path] = [Path(p) for p in spec.default_hidden]
    for p in spec.hide:
        for q in {Path(os.path.abspath(p)), Path(os.path.realpath(p))}:
            wanted.append(q)
            if not q.is_dir():
                wanted.extend(sqlite_sidecars(q)[1:])
    covers: list[str] = []
    done: set[Path] = set()
    etc = _support_files()
    for host in sorted(dict.fromkeys(wanted), key=lambda p: len(p.parts)):
        # A path inside the writable directory is seen at its mount point.
        target = inside / host.relative_to(writable) if _is_under(host, writable) else host
        if target in done or any(_is_under(target, d) for d in done):
            continue
        if not any(_is_under(target, root) for root in visible):
            continue  # not visible inside at all
        if host.is_symlink():
            continue  # bwrap would follow it; its resolved path is wanted too
        if host.is_dir():
            covers += ["--ro-bind", str(etc / "empty.d"), str(target)]
        elif host.exists():
            covers += ["--ro-bind", str(etc / "empty"), str(target)]
        else:
            # Nothing to cover; a placeholder would be left in the host directory.
            continue
        done.add(target)
    return covers


# --------------------------------------------------------------------------- launching


@attrs.define(eq=False)
class Launch:
    """
    A command made ready to start under a sandbox: spawn ``argv`` with ``env`` in ``cwd``.

    Call :meth:`release` once the command has ended.

    Args:
        argv: the full argv (cgroup entry, prlimit, bwrap, the command).
        env: the environment to spawn it with.
        cwd: the host directory to spawn it in.
        sandboxed: whether bubblewrap isolates it.
        process_limit: how the process count is bounded: ``cgroup``, ``rlimit``
            (not root) or ``none`` (root without a pids cgroup).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    sandboxed: bool
    process_limit: str
    _cgroup: Path | None = None
    _refused_before: int = 0
    _home: str | None = None
    _admitted: tuple[tuple[str, int, int, int], ...] | None = None
    # The home is removed in a worker thread while the loop may take it for a spare.
    _home_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def admit(self, pid: int) -> None:
        """
        Join process ``pid`` to the command's cgroup and give it the command's limits,
        from outside: for a launcher that :func:`prestart` made to wait
        (``outside=True``); nothing is done for any other.

        Call it after spawning the launcher and before handing it its line, while
        nothing but the caller can reap it (so that ``pid`` names it).

        Raises:
            OSError: the process is gone, or a limit or the cgroup refused it.
        """
        if self._admitted is None:
            return
        if self._cgroup is not None:
            cgroups.join(self._cgroup, pid)
        for _, which, soft, hard in self._admitted:
            resource.prlimit(pid, which, (soft, hard))

    async def wait_empty(self) -> None:
        """
        Return once no process of the sandbox is left (callers bound the wait).

        The launcher can report the command's exit a moment before the kernel has
        killed the rest of its PID namespace; the pids cgroup, which holds every
        process of the sandbox, says when they are all gone.
        """
        if self._cgroup is None or not self.sandboxed:
            return  # off: a detached child may live on, nothing would end it
        # Polling: cgroup v1 has no event for an emptied pids cgroup. Often the
        # namespace's init is still ending when the launcher has gone: look again
        # soon, then less often.
        pause = 0.0005
        while cgroups.running(self._cgroup):
            await anyio.sleep(pause)
            pause = min(pause * 2, 0.005)

    def release(self, *, keep_home: bool = False) -> bool:
        """
        Give back the cgroup and the private home; return whether forks were refused.

        Args:
            keep_home: leave the private home to :meth:`remove_home`, for a caller
                that removes it off its path (removing a directory can wait on the
                disk for milliseconds).
        """
        refused = False
        if self._cgroup is not None:
            refused = cgroups.refused_forks(self._cgroup) > self._refused_before
            cgroups.release(self._cgroup)
            self._cgroup = None
        if not keep_home:
            self.remove_home()
        return refused

    @property
    def has_home(self) -> bool:
        """Whether a private home (mode ``off``) is still to be removed or taken."""
        return self._home is not None

    def take_empty_home(self) -> str | None:
        """
        Take the private home when the command left it as it was made (an empty
        directory of this user's, mode 0700), for the next command's :func:`prestart`
        to use instead of making one; None when it did not (it stays to be removed).
        """
        with self._home_lock:
            home = self._home
            if home is None or not _pristine_home(home):
                return None
            self._home = None
        return home

    def remove_home(self) -> None:
        """Remove the private home (mode ``off``), if there is one; blocks on the disk."""
        with self._home_lock:
            home, self._home = self._home, None
        if home is not None:
            remove_tree(home)


def _pristine_home(home: str) -> bool:
    try:
        st = os.lstat(home)
        with os.scandir(home) as entries:
            empty = next(entries, None) is None
    except OSError:
        return False
    return (
        empty
        and stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and stat.S_IMODE(st.st_mode) == 0o700
    )


def launch(
    argv: Sequence[str],
    spec: SandboxSpec,
    cwd: str | os.PathLike[str] | None = None,
    *,
    host_env: Mapping[str, str] | None = None,
    marker_env: Mapping[str, str] | None = None,
) -> Launch:
    """
    Prepare ``argv`` to run under ``spec``.

    Args:
        argv: the command.
        spec: the sandbox.
        cwd: the working directory as seen inside (default: where the writable
            directory is mounted).
        host_env: where allowed variables are copied from (default: this process's).
        marker_env: variables for the launcher process only (bubblewrap clears
            them for the command): they mark it as the run's, for a successor.

    Raises:
        SandboxUnavailableError: mode ``auto`` and bubblewrap cannot be used here.
        ConfigError: an empty command.
    """
    return _launch(argv, spec, cwd, host_env, marker_env, outside=False)


def _launch(
    argv: Sequence[str],
    spec: SandboxSpec,
    cwd: str | os.PathLike[str] | None,
    host_env: Mapping[str, str] | None,
    marker_env: Mapping[str, str] | None,
    *,
    outside: bool,
    home: str | None = None,
) -> Launch:
    """:func:`launch`; with ``outside`` (mode ``off``), ``argv`` runs as it is, and
    the cgroup and the limits are given by :meth:`Launch.admit`; ``home``: a private
    home to use (mode ``off``; :meth:`Launch.take_empty_home`), which the launch owns."""
    henv = os.environ if host_env is None else host_env
    inside = spec.inside
    where = Path(cwd) if cwd is not None else inside
    if spec.mode == "auto":
        if home is not None:
            remove_tree(home)  # a sandbox has a home of its own
            home = None
        reason = sandbox_available()
        if reason is not None:
            raise SandboxUnavailableError(reason)
        if spec.lower is not None:
            for made in overlay_dirs(spec.host_dir):
                made.mkdir(exist_ok=True)
        cmd = wrap(argv, spec, where, host_env=henv)
        env = dict(marker_env or {})
        host_cwd = spec.host_dir
    else:
        cmd = list(argv) if outside else wrap(argv, spec, where)
        if home is None:
            home = tempfile.mkdtemp(prefix="proctor-home-")
        env = {**sandbox_env(spec, henv), "HOME": home, **(marker_env or {})}
        host_cwd = command_dir(spec, where)
    process_limit = "rlimit" if os.getuid() != 0 else "none"
    cgroup: Path | None = None
    before = 0
    if spec.use_cgroup:
        cgroup = cgroups.acquire(spec.max_processes)
        if cgroup is not None:
            before = cgroups.refused_forks(cgroup)
            process_limit = "cgroup"
            if not outside:
                # Join the cgroup before prlimit and bwrap start: nothing forks outside it.
                cmd = [
                    "/bin/sh",
                    "-c",
                    'echo $$ > "$0" || exit 125; exec "$@"',
                    str(cgroup / "cgroup.procs"),
                    *cmd,
                ]
    admitted = _rlimits(spec) if outside else None
    sandboxed = spec.mode == "auto"
    return Launch(cmd, env, host_cwd, sandboxed, process_limit, cgroup, before, home, admitted)


# --------------------------------------------------------------------------- prestarting

# The command a prestarted sandbox runs: read one line from standard input (the
# command, written when it is known), give the command /dev/null as its standard
# input, and run the line in this same process, so the command is what bubblewrap
# started, as in a sandbox made for it: a program by ``exec``, a shell command
# line (``/bin/sh -c``) by this ``/bin/sh`` itself (see command_line).
SHELL: Final = "/bin/sh"
"""
The shell a command given as a string runs in (``SHELL -c COMMAND``); a
prestarted sandbox runs such a command in its own shell (:func:`command_line`).
"""
_TRAMPOLINE: Final = 'n="\n"; IFS= read -r line || exit 125; exec </dev/null; eval "$line"'

PRESTART_LINE_LIMIT: Final = 4096
"""
Bytes of a command line a prestarted sandbox takes; a longer command gets a
sandbox of its own (``sh`` reads its line a byte at a time).
"""


def _sh_quote(arg: str) -> str:
    # Single quotes keep every byte but the quote itself; a newline becomes the
    # trampoline's $n, so that the command is one line.
    return "'" + arg.replace("'", "'\\''").replace("\n", "'\"$n\"'") + "'"


def command_dir(spec: SandboxSpec, cwd: str | os.PathLike[str]) -> Path:
    """
    Return the directory a command given ``cwd`` (as seen inside) runs in, as its
    own processes name it: ``cwd`` itself in the sandbox; with mode ``off``, the
    host directory it stands for (the command runs in the writable directory itself).

    Args:
        spec: the sandbox.
        cwd: the working directory as seen inside.
    """
    where = cwd if isinstance(cwd, Path) else Path(cwd)
    if spec.mode == "auto":
        return where
    inside = spec.inside
    if where == inside:
        return spec.host_dir  # the common case: the workspace's root
    rel = where.relative_to(inside) if _is_under(where, inside) else None
    return spec.host_dir / rel if rel is not None else where


def command_line(argv: Sequence[str], cwd: str | os.PathLike[str]) -> bytes | None:
    """
    Return the line that runs ``argv`` in ``cwd`` in a prestarted sandbox, or None
    when the command cannot be given that way (a NUL byte, a line too long).

    Args:
        argv: the command.
        cwd: the working directory as seen inside.
    """
    where = os.fspath(cwd)
    if not argv or any("\0" in a for a in (*argv, where)):
        return None
    # cd sets OLDPWD, which a command made its own sandbox does not get.
    text = f"cd {_sh_quote(where)} || exit 1; unset OLDPWD; "
    if len(argv) == 3 and argv[0] == SHELL and argv[1] == "-c":
        # The trampoline is that shell, started with -c: it runs the script itself,
        # its own two variables gone first ($n is expanded before), where exec would
        # start a second /bin/sh (about 0.7 ms a command). dash names eval in its
        # error messages ("sh: 1: eval: x: not found"); the rest is as sh -c has it.
        text += f'eval "unset n line; "{_sh_quote(argv[2])}\n'
    else:
        text += f"exec {' '.join(_sh_quote(a) for a in argv)}\n"
    line = text.encode("utf-8", "surrogateescape")
    return line if len(line) <= PRESTART_LINE_LIMIT else None


def prestart(
    spec: SandboxSpec,
    marker_env: Mapping[str, str] | None = None,
    *,
    outside: bool = False,
    home: str | None = None,
) -> Launch:
    """
    Prepare a sandbox that is made before its command is known.

    Spawned with a pipe as its standard input, it joins its cgroup, applies its
    limits and (mode ``auto``) lets bubblewrap build its namespaces and mounts,
    then waits for the line :func:`command_line` gives and runs it as the
    sandbox's command: one sandbox per command, as :func:`launch` makes, with the
    set-up done ahead. With mode ``off`` it runs on the host, its line naming the
    host directory (:func:`command_dir`).

    Args:
        spec: the sandbox.
        marker_env: variables for the launcher process only (see :func:`launch`).
        outside: with mode ``off``, the launcher is the waiting ``sh`` alone, and
            the caller joins it to its cgroup and gives it its limits
            (:meth:`Launch.admit`) before handing it its line: that ``sh`` runs
            nothing until then. Only for a caller that alone reaps the process.
            Ignored with mode ``auto`` (bubblewrap forks as it starts).
        home: with mode ``off``, the private home to give it, one an earlier
            command left empty (:meth:`Launch.take_empty_home`); the launch owns
            it from here. None makes one.

    Raises:
        SandboxUnavailableError: mode ``auto`` and bubblewrap cannot be used here.
    """
    trampoline = [SHELL, "-c", _TRAMPOLINE]
    outside = outside and spec.mode == "off"
    return _launch(trampoline, spec, spec.inside, None, marker_env, outside=outside, home=home)


def limit_note(code: int | None, sandboxed: bool, forks_refused: bool) -> str | None:
    """
    Say which limit ended a command, from its exit code, or None.

    Args:
        code: the exit code (negative: killed by that signal; sandboxed: 128+N).
        sandboxed: whether bubblewrap ran it (it reports a signal as 128+N).
        forks_refused: whether the pids cgroup refused forks.
    """
    sig: int | None = None
    if code is not None and code < 0:
        sig = -code
    elif code is not None and sandboxed and code > 128:
        sig = code - 128
    if sig == signal.SIGXCPU:
        return "CPU time limit reached (SIGXCPU)"
    if sig == signal.SIGXFSZ:
        return "file size limit reached (SIGXFSZ)"
    if forks_refused:
        return "process limit reached: forks were refused"
    if sig == signal.SIGKILL and sandboxed:
        return "killed (SIGKILL: the hard CPU limit, memory, or the time limit)"
    return None


# --------------------------------------------------------------------------- task settings


def _env_names(values: Iterable[str]) -> tuple[str, ...]:
    names = _to_names(values)
    for name in names:
        if not name or "=" in name or "\0" in name:
            raise ConfigError(
                f"sandbox: env names {name!r}, which is not a variable name; give names such"
                " as 'CI' or 'PIP_INDEX_URL'"
            )
    return names


@attrs.frozen
class SandboxSettings:
    """
    A task's ``[sandbox]``: how its commands and checks are isolated.

    Args:
        mode: ``auto`` (bubblewrap; the run refuses to start when it cannot be
            used) or ``off`` (commands run on the host; journaled with the run
            and said in the handoff).
        network: ``none`` (no network, not even the host's loopback) or ``host``.
        env: names of host variables commands get, besides :data:`ENV_ALLOWLIST`.
        set_env: variables commands get with these values.
        ro_binds: more host paths commands see read-only (a toolchain).
        cpu_seconds: CPU seconds per process.
        memory_bytes: address space per process.
        max_processes: processes and threads of one command, all told.
        max_file_bytes: the largest file a command may write.
        tmp_bytes: the size of a command's private ``/tmp``.

    Raises:
        ConfigError: an unknown mode or network, a limit that is not a whole
            number > 0, a bad variable name.
    """

    mode: SandboxMode = attrs.field(default="auto", validator=_one_of("auto", "off"))
    network: Network = attrs.field(default="none", validator=_one_of("none", "host"))
    env: tuple[str, ...] = attrs.field(default=(), converter=_env_names)
    set_env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_to_env)
    ro_binds: tuple[Path, ...] = attrs.field(default=(), converter=_to_paths)
    cpu_seconds: int = attrs.field(default=600, validator=_positive)
    memory_bytes: int = attrs.field(default=8 * _GIB, validator=_positive)
    max_processes: int = attrs.field(default=512, validator=_positive)
    max_file_bytes: int = attrs.field(default=512 * _MIB, validator=_positive)
    tmp_bytes: int = attrs.field(default=1 * _GIB, validator=_positive)

    def spec(
        self,
        writable: Path,
        *,
        mount_at: Path | None = None,
        ro_binds: Iterable[Path] = (),
        hide: Iterable[Path] = (),
        extra_writable: Iterable[Path] = (),
    ) -> SandboxSpec:
        """
        Return the sandbox for one command under these settings.

        Args:
            writable: the directory the command may change.
            mount_at: where it appears inside (default: its own path).
            ro_binds: read-only paths besides the settings' own.
            hide: paths to cover.
            extra_writable: more writable directories.
        """
        return SandboxSpec(
            writable=writable,
            mount_at=mount_at,
            mode=self.mode,
            network=self.network,
            ro_binds=(*ro_binds, *self.ro_binds),
            extra_writable=tuple(extra_writable),
            hide=tuple(hide),
            env=self.set_env,
            pass_env=self.env,
            cpu_seconds=self.cpu_seconds,
            memory_bytes=self.memory_bytes,
            max_processes=self.max_processes,
            max_file_bytes=self.max_file_bytes,
            tmp_bytes=self.tmp_bytes,
        )

    def describe(self) -> dict[str, Any]:
        """The settings as plain data, for the journal (and a resume)."""
        return {
            "mode": self.mode,
            "network": self.network,
            "env": list(self.env),
            "set_env": dict(self.set_env),
            "ro_binds": [str(p) for p in self.ro_binds],
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "max_processes": self.max_processes,
            "max_file_bytes": self.max_file_bytes,
            "tmp_bytes": self.tmp_bytes,
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], base: Path | None = None) -> SandboxSettings:
        """
        Build settings from a ``[sandbox]`` table (or :meth:`describe`'s data).

        Args:
            data: the table.
            base: the directory relative ``ro_binds`` are taken from.

        Raises:
            ConfigError: an unknown key or a bad value; the message names it.
        """
        allowed = set(attrs.fields_dict(cls))
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigError(
                f"sandbox.{unknown[0]}: unknown key; accepted: {', '.join(sorted(allowed))}"
            )
        values = dict(data)
        for key in ("env", "ro_binds"):
            if key in values and (
                not isinstance(values[key], list)
                or not all(isinstance(v, str) for v in values[key])
            ):
                raise ConfigError(f"sandbox.{key}: must be a list of strings, not {values[key]!r}")
        if "set_env" in values:
            table = values["set_env"]
            if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
                raise ConfigError(
                    'sandbox.set_env: must be a table of strings, e.g. { CI = "1" },'
                    f" not {table!r}"
                )
        if "ro_binds" in values and base is not None:
            values["ro_binds"] = [base / p for p in values["ro_binds"]]
        try:
            return cls(**values)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("sandbox: ", "sandbox.", 1)) from None
        except TypeError as exc:
            raise ConfigError(f"sandbox: {exc}") from None
