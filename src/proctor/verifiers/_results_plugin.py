"""
The pytest plugin that reports a pytest check's per-test results to the verifier.

This file is not imported by proctor: it is copied as ``proctor_results.py``
into a directory of its own and loaded by the check's pytest (``-p
proctor_results``, the directory on ``PYTHONPATH``), under whatever Python the
check runs, so it uses the standard library only.

The program under test runs in pytest's process and may do anything there,
including after pytest is done: a report it can write is a report it can
forge. So every report is sent when pytest makes it, as a line in an
append-only file, numbered and signed with HMAC-SHA256 under a key the plugin
reads once, before any code of the workspace is imported, and removes. The
verifier accepts the file only when every line verifies, the numbers run from
0 without a gap and the last line is pytest's own end of session: a line
removed, changed, added or moved, or a session that never ended (``os._exit``
inside a test, a kill) gives no results at all.

While tests run, the plugin also watches the parts of pytest and pluggy that
make and carry a test's outcome: a class of theirs given a new attribute, a
function given a new body, a module-level name rebound, or a hook
implementation of ``pytest_runtest_makereport``/``pytest_runtest_logreport``/
``pytest_report_teststatus`` registered later by anything but a ``conftest.py``
is reported as a ``tampered`` line, which fails the check.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

PLUGIN_NAME = "proctor_results"
RESULTS_ENV = "PROCTOR_RESULTS"
KEY_NAME = "key"
FRAMES_NAME = "frames"

# Where a test's outcome is made and carried: rebinding what these define is tampering.
_WATCHED_MODULES = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.skipping",
    "_pytest.outcomes",
    "_pytest.main",
    "_pytest.terminal",
    "pluggy._hooks",
    "pluggy._callers",
    "pluggy._manager",
    "pluggy._result",
)
_WATCHED_HOOKS = (
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_report_teststatus",
    "pytest_runtest_protocol",
    "pytest_runtest_call",
    "pytest_pyfunc_call",
)


class _Reporter:
    """The one writer of a check's frames file, and the watch on pytest's outcome path."""

    def __init__(self, directory: str) -> None:
        key_path = os.path.join(directory, KEY_NAME)
        with open(key_path, "rb") as f:
            key = f.read()
        os.unlink(key_path)
        self._mac = hmac.new(key, digestmod=hashlib.sha256)
        del key
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(os.path.join(directory, FRAMES_NAME), flags, 0o600)
        self._write = os.write
        self._seq = 0
        self._ended = False
        self._tampered: set[str] = set()
        self._bound: list[tuple[Any, str, Any, str]] = []
        # The hook implementations known at the session's start, and conftest.py's.
        self._impls: set[Any] | None = None
        self._manager: Any = None

    def send(self, kind: str, **fields: Any) -> None:
        if self._ended:
            return
        fields["t"] = kind
        body = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        head = f"{self._seq} {body}"
        mac = self._mac.copy()
        mac.update(head.encode("ascii"))
        data = f"{mac.hexdigest()} {head}\n".encode("ascii")
        while data:
            data = data[self._write(self._fd, data) :]
        self._seq += 1

    def _tamper(self, what: str) -> None:
        if what not in self._tampered:
            self._tampered.add(what)
            self.send("tampered", what=what)

    # ------------------------------------------------------------- the watch

    def watch(self) -> None:
        # What is bound now in the watched modules and their classes: functions,
        # classes, methods, properties. Compared, by identity, at each test's call.
        for name in _WATCHED_MODULES:
            module = sys.modules.get(name)
            if module is None:
                continue
            space = vars(module)
            for attr, value in space.items():
                if callable(value):
                    self._bound.append((space, attr, value, f"{name}.{attr}"))
                if isinstance(value, type) and value.__module__ == name:
                    for key, member in vars(value).items():
                        if callable(member) or hasattr(member, "__get__"):
                            where = f"{name}.{attr}.{key}"
                            self._bound.append((vars(value), key, member, where))
        if hasattr(sys, "addaudithook"):
            sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        # A function's body replaced: the one such change Python audits.
        if event == "object.__setattr__" and args[1] == "__code__":
            module = getattr(args[0], "__module__", None)
            if module in _WATCHED or module == __name__:
                self._tamper(f"{module}.{getattr(args[0], '__qualname__', '?')}.__code__ set")

    def check(self) -> None:
        for space, key, value, where in self._bound:
            if space.get(key) is not value:
                self._tamper(f"{where} rebound")
        if self._impls is None or self._manager is None:
            return
        for impl in _hook_impls(self._manager):
            if impl not in self._impls:
                if not _is_conftest(impl.plugin):
                    hook = impl.function.__name__
                    self._tamper(f"{hook} implemented by {impl.plugin_name}")
                self._impls.add(impl)

    # ------------------------------------------------------------- pytest's hooks

    def pytest_sessionstart(self, session: Any) -> None:
        # Every plugin is registered by now; later ones come from conftest.py
        # files (the harness) or from the code under test.
        self._manager = session.config.pluginmanager
        self._impls = set(_hook_impls(self._manager))
        self.check()

    def pytest_collectreport(self, report: Any) -> None:
        if not report.passed:
            outcome = "error" if report.failed else "skipped"
            self.send("test", id=report.nodeid, when="collect", outcome=outcome)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            self.check()
        elif report.passed:
            return  # a setup or teardown that passed says nothing the call does not
        self.send("test", id=report.nodeid, when=report.when, outcome=report.outcome)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.check()
        self.send("end", exit=int(exitstatus))
        self._ended = True
        with contextlib.suppress(OSError):
            os.close(self._fd)


_WATCHED = frozenset(_WATCHED_MODULES)


def _hook_impls(manager: Any) -> Iterator[Any]:
    for hook in _WATCHED_HOOKS:
        caller = getattr(manager.hook, hook, None)
        if caller is not None:
            yield from caller.get_hookimpls()


def _is_conftest(plugin: Any) -> bool:
    path = getattr(plugin, "__file__", None) if type(plugin).__name__ == "module" else None
    return isinstance(path, str) and os.path.basename(path) in ("conftest.py", "conftest.pyc")


def _start() -> _Reporter | None:
    directory = os.environ.pop(RESULTS_ENV, None)
    if not directory or __name__ != PLUGIN_NAME:
        return None  # imported by proctor itself, or by a pytest no verifier asked for
    _forget(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(directory, KEY_NAME)):
        return None  # a second pytest of the same command: the first one's results stand
    reporter = _Reporter(directory)
    reporter.send("start", pid=os.getpid(), python=sys.version.split()[0])
    reporter.watch()
    return reporter


def _forget(here: str) -> None:
    # The processes the tests start (a pytest of their own, say) get the
    # environment as it was before proctor's additions.
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    plugin = f"-p {PLUGIN_NAME}"
    if addopts.startswith(plugin):
        rest = addopts[len(plugin) :].lstrip()
        if rest:
            os.environ["PYTEST_ADDOPTS"] = rest
        else:
            del os.environ["PYTEST_ADDOPTS"]
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if paths and paths[0] == here:
        if paths[1:]:
            os.environ["PYTHONPATH"] = os.pathsep.join(paths[1:])
        else:
            del os.environ["PYTHONPATH"]


_REPORTER = _start()


def pytest_configure(config: Any) -> None:
    if _REPORTER is None or hasattr(config, "workerinput"):
        return  # no verifier asked, or an xdist worker: its reports reach the controller
    config.pluginmanager.register(_REPORTER, "proctor-results-reporter")
