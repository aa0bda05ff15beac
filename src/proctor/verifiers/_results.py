"""
A pytest check's per-test results, sent by a plugin inside pytest and read by the verifier.

The code under test runs in pytest's own process, so anything pytest writes
where that process can reach, it can rewrite: a JUnit report stripped of its
failures by an ``atexit`` hook, an exit code forced to 0. :class:`ResultsChannel`
gives the check's pytest a plugin (``proctor_results``, on ``PYTHONPATH`` and
loaded with ``-p``) and a one-time key; the plugin signs each report as pytest
makes it, in order, and :meth:`ResultsChannel.read` accepts the file only
whole: every line signed, numbered from 0 without a gap, the last one pytest's
own end of session, and no line saying the plugin saw the outcome's path in
pytest changed (see ``_results_plugin``). Anything else is a
:class:`ResultsError` and the check fails.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

import attrs

from proctor._fs import read_inside, remove_tree
from proctor.verifiers import _results_plugin as plugin
from proctor.verifiers._harness import keep_worst

__all__ = ("PLUGIN_MODULE", "ResultsChannel", "ResultsError")

PLUGIN_MODULE: Final = plugin.PLUGIN_NAME
"""The module name the plugin is loaded under; a workspace file of that name is harness."""

_MAX_BYTES: Final = 256 * 1024 * 1024
_OUTCOMES: Final = frozenset(("passed", "failed", "skipped", "error"))
_WHENS: Final = frozenset(("collect", "setup", "call", "teardown"))

ResultsProblem = Literal["missing", "forged", "unfinished", "tampered"]


class ResultsError(Exception):
    """
    A pytest check gave no per-test results that can be trusted.

    Args:
        kind: ``missing`` (the plugin never ran), ``forged`` (a line that does
            not verify, out of order, or after the end), ``unfinished`` (no end
            of session: killed, crashed, or exited from inside a test) or
            ``tampered`` (the code under test changed how pytest makes outcomes).
        message: what was found, for the check's evidence.
    """

    def __init__(self, kind: ResultsProblem, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _source() -> bytes:
    return Path(plugin.__file__).read_bytes()


@attrs.define(eq=False)
class ResultsChannel:
    """
    One pytest check run's plugin directory, key and results file.

    Made with :meth:`open` before the command starts, :meth:`read` after it
    ended, :meth:`close` always. ``directory`` must be writable by the command
    (the sandbox binds it at its own path); nothing else of the host is.
    """

    directory: Path
    _key: bytes = attrs.field(repr=False)

    @classmethod
    def open(cls) -> ResultsChannel:
        """Make the directory: the plugin's source under ``plugin/`` and a fresh key."""
        directory = Path(tempfile.mkdtemp(prefix="pytest-report-"))
        try:
            (directory / "plugin").mkdir()
            (directory / "plugin" / f"{PLUGIN_MODULE}.py").write_bytes(_source())
            key = secrets.token_bytes(32)
            fd = os.open(directory / plugin.KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
        except BaseException:
            remove_tree(directory)
            raise
        return cls(directory, key)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """
        Return the variables that make the check's pytest load the plugin.

        Args:
            base: the environment the command would get otherwise, whose
                ``PYTHONPATH`` and ``PYTEST_ADDOPTS`` are kept after the plugin's.
        """
        path = os.fspath(self.directory / "plugin")
        if base.get("PYTHONPATH"):
            path = f"{path}{os.pathsep}{base['PYTHONPATH']}"
        addopts = shlex.join(["-p", PLUGIN_MODULE])
        if base.get("PYTEST_ADDOPTS"):
            addopts = f"{addopts} {base['PYTEST_ADDOPTS']}"
        return {
            "PYTHONPATH": path,
            "PYTEST_ADDOPTS": addopts,
            plugin.RESULTS_ENV: os.fspath(self.directory),
        }

    def read(self) -> dict[str, str]:
        """
        Return each test's outcome (``passed``, ``failed``, ``error``, ``skipped``), by node id.

        A test's worst report decides: a failed setup or teardown is an
        ``error``, as is a module that could not be collected.

        Raises:
            ResultsError: the results are missing, forged, unfinished, or pytest was tampered with.
        """
        try:
            data = read_inside(self.directory, plugin.FRAMES_NAME, _MAX_BYTES)
        except FileNotFoundError:
            raise ResultsError(
                "missing",
                "pytest did not load proctor's results plugin (pytest did not start, or the "
                "command replaced PYTHONPATH or PYTEST_ADDOPTS instead of extending them)",
            ) from None
        except OSError as exc:
            raise ResultsError("missing", f"the per-test results cannot be read: {exc}") from exc
        if len(data) > _MAX_BYTES:
            raise ResultsError("forged", f"the per-test results are over {_MAX_BYTES} bytes")
        return _parse(data, self._key)

    def close(self) -> None:
        """Remove the directory and everything the command left in it."""
        remove_tree(self.directory)


def _parse(data: bytes, key: bytes) -> dict[str, str]:
    # Kept whole: one pass over the lines checks each line's signature, number and
    # place and folds it into the outcomes; split, the order rules would be spread out.
    mac = hmac.new(key, digestmod=hashlib.sha256)
    tests: dict[str, str] = {}
    tampered: list[str] = []
    ended = False
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for seq, line in enumerate(lines):
        where = f"line {seq + 1} of the per-test results"
        if ended:
            raise ResultsError("forged", f"{where} follows the end of the session")
        signature, _, head = line.partition(b" ")
        check = mac.copy()
        check.update(head)
        if not hmac.compare_digest(check.hexdigest().encode("ascii"), signature):
            raise ResultsError("forged", f"{where} is not the plugin's (its signature fails)")
        number, _, body = head.partition(b" ")
        if number != str(seq).encode("ascii"):
            raise ResultsError("forged", f"{where} is out of order")
        try:
            frame = json.loads(body)
        except ValueError:
            frame = None
        if not isinstance(frame, dict):
            raise ResultsError("forged", f"{where} is not a JSON object")
        kind = frame.get("t")
        if seq == 0:
            if kind != "start":
                raise ResultsError("forged", f"{where} is not the start of the session")
            continue
        if kind == "test":
            node, when, outcome = frame.get("id"), frame.get("when"), frame.get("outcome")
            if not isinstance(node, str) or when not in _WHENS or outcome not in _OUTCOMES:
                raise ResultsError("forged", f"{where} is not a test report: {frame!r}")
            if outcome == "failed" and when != "call":
                outcome = "error"
            keep_worst(tests, node, outcome)
        elif kind == "tampered":
            tampered.append(str(frame.get("what")))
        elif kind == "end":
            ended = True
        else:
            raise ResultsError("forged", f"{where} is of no known kind: {kind!r}")
    if not lines:
        raise ResultsError("unfinished", "pytest loaded the results plugin but reported nothing")
    if tampered:
        more = f" (+{len(tampered) - 5} more)" if len(tampered) > 5 else ""
        shown = "; ".join(tampered[:5]) + more
        raise ResultsError(
            "tampered", f"the code under test changed how pytest makes outcomes: {shown}"
        )
    if not ended:
        raise ResultsError(
            "unfinished",
            f"pytest's session did not end ({len(tests)} test(s) reported): it was killed, "
            "crashed, or a test ended the process",
        )
    return tests
