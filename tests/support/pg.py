"""
A real PostgreSQL server for the tests, started from the machine's own packages.

:func:`running_server` runs ``initdb`` into a new temporary directory, then
``pg_ctl start`` with the server listening on 127.0.0.1 only, on a free port, and
yields the URL of its ``postgres`` database. The server runs with ``fsync=off``
and ``full_page_writes=off``: the tests need no durability across a power cut, and
these make creating a database per test cheap. When the ``with`` block ends,
whatever happened inside, the server is stopped (``pg_ctl stop -m fast``) and its
directory removed.

PostgreSQL refuses to run as root. When the tests run as root, ``initdb`` and the
server run as the system user :data:`SERVER_USER` (through ``runuser``), which is
created with ``useradd --system`` when absent; the temporary directory is given to
that user. As any other user they run as that user.

The binaries are looked up under ``/usr/lib/postgresql/*/bin`` (Debian's layout,
newest version first), then on ``PATH``. When there are none, :class:`PgUnavailable`
says how to install them: the tests fail rather than skip, so that a machine
without PostgreSQL cannot pass the suite by testing half of it.

With :data:`URL_ENV` set to the URL of an existing server (a role allowed to
create databases), the tests use it and start nothing.

Each test gets a place of its own: :func:`fresh_schema` creates an empty schema
and yields a URL whose ``search_path`` is that schema (asyncpg sends unknown URL
parameters as server settings), dropped after the test; it costs a millisecond
where a database costs a tenth of a second. :func:`fresh_database` creates a whole
database from ``template0``, for the tests that need one.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

__all__ = (
    "SERVER_USER",
    "URL_ENV",
    "PgUnavailable",
    "find_binaries",
    "fresh_database",
    "fresh_schema",
    "running_server",
)

#: The environment variable that names an existing server to test against.
URL_ENV = "PROCTOR_TEST_PG_URL"

#: The system user the server runs as when the tests run as root.
SERVER_USER = "proctorpg"

_NEEDED = ("initdb", "pg_ctl", "postgres")
_INSTALL_HINT = (
    "install the server packages (Debian: `apt-get install postgresql-15`, or "
    "`apt-get install postgresql`), or set "
    f"{URL_ENV}=postgresql://USER@HOST:PORT/postgres to test against an existing server"
)
#: The longest ``pg_ctl`` waits for the server to start or stop, in seconds.
_PG_CTL_WAIT = 60
_START_ATTEMPTS = 3


class PgUnavailable(RuntimeError):
    """No PostgreSQL server could be started: the binaries are missing or it would not start."""


def find_binaries(root: Path = Path("/usr/lib/postgresql"), *, use_path: bool = True) -> Path:
    """
    Return the directory that holds ``initdb``, ``pg_ctl`` and ``postgres``.

    Args:
        root: where the versions are installed, as ``ROOT/VERSION/bin``.
        use_path: also look beside the ``pg_ctl`` found on ``PATH``.

    Raises:
        PgUnavailable: no directory holds all three.
    """
    candidates: list[Path] = sorted(
        root.glob("*/bin"),
        key=lambda path: _version_key(path.parent.name),
        reverse=True,
    )
    on_path = shutil.which("pg_ctl") if use_path else None
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in _NEEDED):
            return directory
    looked = ", ".join(str(path) for path in candidates) or f"{root}/*/bin"
    raise PgUnavailable(
        f"the PostgreSQL journal tests need a PostgreSQL server: no directory holds "
        f"{', '.join(_NEEDED)} (looked in {looked}): {_INSTALL_HINT}"
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


@contextlib.contextmanager
def running_server() -> Iterator[str]:
    """
    Start a throwaway server for the body of the ``with`` block; yield its admin URL.

    Raises:
        PgUnavailable: the binaries are missing, or the server would not start.
    """
    binaries = find_binaries()
    user = _server_user()
    base = Path(tempfile.mkdtemp(prefix="proctor-pg-"))
    try:
        if user is not None:
            shutil.chown(base, user, user)
        data = base / "data"
        _run(
            user,
            [
                str(binaries / "initdb"),
                "--pgdata",
                str(data),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            "initdb",
        )
        port = _start(binaries, user, base, data)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            _stop(binaries, user, data)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _server_user() -> str | None:
    """Return the user to run the server as, creating it if needed; None for the current one."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        _run(
            None,
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            f"create the system user {SERVER_USER}",
        )
    return SERVER_USER


def _start(binaries: Path, user: str | None, base: Path, data: Path) -> int:
    """Start the server on a free port; return the port."""
    log = base / "server.log"
    for attempt in range(1, _START_ATTEMPTS + 1):
        port = _free_port()
        options = " ".join(
            (
                "-c listen_addresses=127.0.0.1",
                f"-c port={port}",
                f"-c unix_socket_directories={base}",
                "-c fsync=off",
                "-c full_page_writes=off",
            )
        )
        try:
            _run(
                user,
                [
                    str(binaries / "pg_ctl"),
                    "--pgdata",
                    str(data),
                    "--log",
                    str(log),
                    "--wait",
                    "--timeout",
                    str(_PG_CTL_WAIT),
                    "--silent",
                    "--options",
                    options,
                    "start",
                ],
                "start the server",
            )
        except PgUnavailable as exc:
            # The port may have been taken between our probe and the server's bind.
            if attempt == _START_ATTEMPTS:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise PgUnavailable(f"{exc}\nserver log:\n{tail}") from exc
            continue
        return port
    raise AssertionError("unreachable")  # pragma: no cover


def _stop(binaries: Path, user: str | None, data: Path) -> None:
    pg_ctl = str(binaries / "pg_ctl")
    wait = ["--wait", "--timeout", str(_PG_CTL_WAIT), "--silent"]
    try:
        _run(user, [pg_ctl, "--pgdata", str(data), "--mode", "fast", *wait, "stop"], "stop")
    except PgUnavailable:
        # A fast stop waits for nothing but its own shutdown checkpoint; if even
        # that failed, stop without one: the directory is removed next anyway.
        with contextlib.suppress(PgUnavailable):
            _run(user, [pg_ctl, "--pgdata", str(data), "--mode", "immediate", *wait, "stop"], "")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _run(user: str | None, command: Sequence[str], what: str) -> None:
    argv = [*(["runuser", "-u", user, "--"] if user is not None else []), *command]
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-2000:]
        raise PgUnavailable(
            f"could not {what} (`{' '.join(argv)}` exited with {done.returncode}): {output}"
        )


@contextlib.asynccontextmanager
async def fresh_database(admin_url: str) -> AsyncIterator[str]:
    """
    Create an empty database on the server of ``admin_url``; yield its URL; drop it after.

    Args:
        admin_url: a URL whose role may create databases.
    """
    name = f"proctor_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'")
    finally:
        await admin.close()
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        admin = await asyncpg.connect(admin_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def fresh_schema(admin_url: str) -> AsyncIterator[str]:
    """
    Create an empty schema in the database of ``admin_url``; yield a URL that uses it.

    The URL's ``search_path`` is the new schema alone, so everything created
    through it lands there. The schema and all it holds are dropped after.

    Args:
        admin_url: a URL whose role may create schemas in its database.
    """
    name = f"proctor_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE SCHEMA "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(admin_url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), ("search_path", name)]
    try:
        yield urlunsplit(parts._replace(query=urlencode(query)))
    finally:
        admin = await asyncpg.connect(admin_url)
        try:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await admin.close()
