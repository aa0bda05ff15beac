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

While tests run, the plugin also watches pytest and pluggy (every module of
``_pytest``, ``pytest`` and ``pluggy``): a class of theirs given a new method or
property, or one of its methods rebound or removed, a module-level function
rebound, a function given a new body or defaults, a hook implementation
registered after the session started by anything but a ``conftest.py`` pytest
loaded from a file older than the session, or a collected test item given a
different function, session, config or one of its methods in its own
``__dict__``, is reported as a ``tampered`` line, which fails the check. Before
the session starts (a ``conftest.py`` importing the project), pytest's own code
may still change pytest (``_pytest.legacypath`` adds properties); nothing else
may. Reports of an outcome pytest does not define (pytest-rerunfailures'
``rerun``, an attempt a later report supersedes) are not sent, and pytest-xdist's
distribution is turned off: its workers run the code under test where the
plugin does not watch, so the tests run in pytest's own process.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import operator
import os
import sys
import sysconfig
import time
import types
from collections.abc import Iterator
from itertools import chain
from typing import Any

__all__ = ("FRAMES_NAME", "KEY_NAME", "PLUGIN_NAME", "RESULTS_ENV", "pytest_configure")

PLUGIN_NAME = "proctor_results"
RESULTS_ENV = "PROCTOR_RESULTS"
KEY_NAME = "key"
FRAMES_NAME = "frames"

# Where a test's outcome is made and carried: rebinding what these define is tampering.
_WATCHED_PACKAGES = ("_pytest", "pytest", "pluggy")
_OUTCOMES = ("passed", "failed", "skipped")
_MISSING: Any = object()
_NOT_PATCHED: Any = object()
# A paced watch runs once ten of its own durations have passed since its last run.
_PACE = 10.0


def _watched(module: object) -> bool:
    name = module if isinstance(module, str) else None
    return name is not None and name.partition(".")[0] in _WATCHED_PACKAGES


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
        # Files changed after this were written by the run itself.
        self._born = os.fstat(self._fd).st_ctime_ns
        self._write = os.write
        self._seq = 0
        self._ended = False
        self._started = False
        self._tampered: set[str] = set()
        # Each watched namespace (a module's, a class's) as it was last seen.
        self._spaces: dict[int, tuple[Any, str, Any, dict[str, Any], list[str], list[Any]]] = {}
        # The same, flat, for the one pass of each check.
        self._flat: bool | None = None
        self._volatile: list[list[Any]] = []
        self._moving: set[tuple[int, str]] = set()
        self._views: list[Any] = []
        self._getters: list[Any] = []
        self._lens: list[int] = []
        self._keys: list[list[str]] = []
        self._values: list[Any] = []
        self._own: tuple[str, ...] = ()
        self._modules = 0
        # The hook implementations known at the session's start, and conftest.py's.
        self._impls: set[Any] | None = None
        self._manager: Any = None
        self._session: Any = None
        self._objs: dict[int, tuple[Any, Any]] = {}
        self._checked_at = 0.0
        self._item: Any = None
        self._files: dict[int, str] = {}
        self._monkeypatch: Any = None
        self._notset: Any = _NOT_PATCHED
        self._check_cost = 0.0
        self._base_cost = 0.0

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
        # pytest's, pluggy's and the installed plugins' code lives here (the
        # plugins load after this one, and some change pytest as they do).
        own = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
        for name in _WATCHED_PACKAGES:
            path = getattr(sys.modules.get(name), "__file__", None)
            own.append(os.path.dirname(path) if isinstance(path, str) else None)
        self._own = tuple({os.path.join(os.path.realpath(d), "") for d in own if d})
        self._record()
        self._flatten()
        start = time.perf_counter()
        self.check()
        self._base_cost = time.perf_counter() - start
        # pytest's own class, as loaded before any code under test: a look-alike is not it.
        module = sys.modules.get("_pytest.monkeypatch")
        space = vars(module) if module is not None else {}
        self._monkeypatch = space.get("MonkeyPatch")
        # What it records for a name it added (``raising=False``): ``NOTSET`` since pytest 8.
        self._notset = space.get("NOTSET", space.get("notset", _NOT_PATCHED))
        if hasattr(sys, "addaudithook"):
            sys.addaudithook(self._audit)

    def _record(self) -> None:
        # What the watched modules and their classes hold now (modules imported
        # since are added as they are): compared, by identity, at each test's call.
        self._modules = len(sys.modules)
        for name, module in list(sys.modules.items()):
            if not _watched(name) or module is None or id(module) in self._spaces:
                continue
            self._keep(module, name)
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__ == name:
                    self._keep(value, f"{name}.{attr}")

    def _keep(self, owner: Any, where: str, held: dict[str, Any] | None = None) -> None:
        view = vars(owner)  # a live view: a class's is a new proxy of the same dict
        seen = dict(view)
        for name, before in (held or {}).items():
            # A test's monkeypatch, to be undone at its teardown: the value it
            # will come back to is the one kept.
            if before is _MISSING:
                seen.pop(name, None)
            else:
                seen[name] = before
        keys = [k for k, v in seen.items() if _code(v) and (id(owner), k) not in self._moving]
        self._spaces[id(owner)] = (owner, where, view, seen, keys, [seen[k] for k in keys])
        self._flat = None

    def _flatten(self) -> None:
        kept = list(self._spaces.values())
        self._views = [view for _, _, view, _, _, _ in kept]
        self._getters = [view.get for view in self._views]
        self._lens = [len(seen) for _, _, _, seen, _, _ in kept]
        self._keys = [keys for _, _, _, _, keys, _ in kept]
        self._values = [v for _, _, _, _, _, values in kept for v in values]
        self._flat = True

    def _compare(self) -> None:
        patched = self._patched()
        for owner, where, view, seen, keys, values in list(self._spaces.values()):
            if len(view) == len(seen) and all(map(operator.is_, map(view.get, keys), values)):
                continue
            held: dict[str, Any] = {}
            for name in {*seen, *view}:
                before, now = seen.get(name, _MISSING), view.get(name, _MISSING)
                if before is now:
                    continue
                if patched.get((id(owner), name), _NOT_PATCHED) is before and self._is_own(
                    now, within=self._item_file()
                ):
                    held[name] = before
                elif not self._allowed(owner, before, now):
                    how = (
                        "removed"
                        if now is _MISSING
                        else "added"
                        if before is _MISSING
                        else "rebound"
                    )
                    self._tamper(f"{where}.{name} {how}")
                elif isinstance(owner, types.ModuleType) and name in seen and name in view:
                    # A module's hook pytest sets for each test (``_reprcompare``):
                    # watched on its own, so the one pass over the rest stays in C.
                    self._volatile.append([owner, where, name, now])
                    self._moving.add((id(owner), name))
            self._keep(owner, where, held)

    def _patched(self) -> dict[tuple[int, str], Any]:
        # What the running test's own ``monkeypatch`` fixture set, with the value
        # it restores at the test's teardown: a change to pytest a test makes
        # for itself and pytest undoes. A patch taken off the fixture's list
        # stays, and is then seen as any other change.
        item = self._item
        fixture = getattr(item, "funcargs", {}).get("monkeypatch") if item is not None else None
        records = getattr(fixture, "_setattr", None)
        if fixture is None or type(fixture) is not self._monkeypatch or type(records) is not list:
            return {}
        out: dict[tuple[int, str], Any] = {}
        for record in records:
            if isinstance(record, tuple) and len(record) == 3 and isinstance(record[1], str):
                target, name, old = record
                # The first record of a name holds the value before the test.
                out.setdefault((id(target), name), _MISSING if old is self._notset else old)
        return out

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        # A function's body or defaults replaced: the changes to a function Python audits.
        if event == "object.__setattr__" and args[1] in (
            "__code__",
            "__defaults__",
            "__kwdefaults__",
        ):
            module = getattr(args[0], "__module__", None)
            if _watched(module) or module == __name__:
                self._tamper(f"{module}.{getattr(args[0], '__qualname__', '?')}.{args[1]} set")

    def check(self) -> None:
        # One pass in C over what runs (functions, classes, descriptors) and the
        # namespaces' sizes; only when that differs is each namespace compared.
        if not (
            list(map(len, self._views)) == self._lens
            and all(
                map(
                    operator.is_,
                    chain.from_iterable(map(map, self._getters, self._keys)),
                    self._values,
                )
            )
        ):
            self._compare()
        for entry in self._volatile:
            owner, where, name, before = entry
            now = vars(owner).get(name, _MISSING)
            if now is not before:
                if not self._allowed(owner, before, now):
                    self._tamper(f"{where}.{name} rebound")
                entry[3] = now
        if len(sys.modules) != self._modules:
            self._record()
        if self._flat is None:
            self._flatten()
        if self._impls is None or self._manager is None:
            return
        for impl in _hook_impls(self._manager):
            if impl not in self._impls:
                if not self._is_conftest(impl.plugin):
                    hook = impl.function.__name__
                    self._tamper(f"{hook} implemented by {impl.plugin_name}")
                self._impls.add(impl)

    def _paced_check(self) -> None:
        # The whole watch takes about half a millisecond; between a session's
        # start, its collection's end and its end, it runs at a test's report
        # once its last run is ten of its own durations ago: at most a tenth
        # more time. A change that stays is seen by the end whatever the pace;
        # one undone between two checks is not (see docs/security.md).
        # Its duration is what the code under test can make as long as it
        # likes (sys.modules grown by a million names, each new one looked at;
        # a module of ``_pytest``'s name made for each) to leave the tests
        # after a long check unwatched: it paces the watch only up to twice
        # that of the watch's first run, before any code under test.
        now = time.perf_counter()
        if now - self._checked_at >= _PACE * self._check_cost:
            self.check()
            done = time.perf_counter()
            self._check_cost = min(done - now, 2 * self._base_cost)
            self._checked_at = done

    def _allowed(self, owner: Any, before: Any, now: Any) -> bool:
        # Data (counters, caches, a hook set for a test and back to None) may
        # change; a class's code may not, but pytest fills in what was data with
        # its own code, sets a module's hooks for each test (``_reprcompare``)
        # and, before the session starts, pytest's plugins still set it up.
        if not _code(now):
            return True
        if not self._started or not _code(before) or isinstance(owner, types.ModuleType):
            return self._is_own(now)
        return False

    def _is_own(self, value: Any, depth: int = 0, within: tuple[str, ...] | None = None) -> bool:
        # Code from pytest's, pluggy's and the installed plugins' directories, or
        # from the files ``within`` names.
        roots = self._own if within is None else within
        if depth > 3:
            return False
        if value is _MISSING or not _code(value):
            return True
        if isinstance(value, property):
            return all(
                f is None or self._is_own(f, depth + 1, roots)
                for f in (value.fget, value.fset, value.fdel)
            )
        if isinstance(value, (classmethod, staticmethod, types.MethodType)):
            return self._is_own(value.__func__, depth + 1, roots)
        if isinstance(value, types.FunctionType):
            path = value.__code__.co_filename
        elif isinstance(value, type):
            path = getattr(sys.modules.get(value.__module__), "__file__", None) or ""
        else:
            return False
        return os.path.realpath(path).startswith(roots) if roots else False

    def _item_file(self) -> tuple[str, ...]:
        # The running test's own file, as collected: a test patches pytest with
        # code of its own file (the code under test's patch, through the test's
        # fixture or one it put there, comes from elsewhere).
        path = self._files.get(id(self._item))
        return (path,) if path is not None else ()

    def _is_conftest(self, plugin: Any) -> bool:
        # One pytest loaded itself, from a file that was there before the run.
        if not _is_conftest(plugin):
            return False
        if plugin not in getattr(self._manager, "_conftest_plugins", (plugin,)):
            return False
        try:
            return os.stat(plugin.__file__).st_ctime_ns < self._born
        except OSError:
            return False

    def _check_item(self, item: Any) -> None:
        if self._session is not None:
            if getattr(item, "session", None) is not self._session:
                self._tamper(f"{item.nodeid}: session replaced")
            if getattr(item, "config", None) is not self._session.config:
                self._tamper(f"{item.nodeid}: config replaced")
        space = getattr(item, "__dict__", {})
        for name, value in list(space.items()):
            if callable(value) and callable(getattr(type(item), name, None)):
                self._tamper(f"{item.nodeid}: {name} replaced on the item")
        known = self._objs.get(id(item))
        if known is not None and known[0] is item:
            now = space.get("_obj", known[1])
            if getattr(now, "__func__", now) is not getattr(known[1], "__func__", known[1]):
                self._tamper(f"{item.nodeid}: its test function replaced")

    # ------------------------------------------------------------- pytest's hooks

    def pytest_sessionstart(self, session: Any) -> None:
        self._manager = session.config.pluginmanager
        self._session = session
        self.check()
        self._started = True

    def pytest_collectstart(self, collector: Any) -> None:
        if self._impls is None and self._manager is not None:
            # Every plugin is registered by now (pytest's fixture manager in a
            # pytest_sessionstart after this one's); later ones come from
            # conftest.py files (the harness) or from the code under test.
            self._impls = set(_hook_impls(self._manager))

    def pytest_collection_finish(self, session: Any) -> None:
        self.check()  # the test modules, and what they import, are loaded now
        for item in getattr(session, "items", ()):
            obj = getattr(item, "__dict__", {}).get("_obj")
            if obj is not None:
                self._objs[id(item)] = (item, obj)
            path = getattr(item, "path", None) or getattr(item, "fspath", None)
            if path is not None:
                self._files[id(item)] = os.path.realpath(os.fspath(path))

    def pytest_collectreport(self, report: Any) -> None:
        if not report.passed:
            outcome = "error" if report.failed else "skipped"
            self.send("test", id=report.nodeid, when="collect", outcome=outcome)

    def pytest_runtest_call(self, item: Any) -> None:
        self._item = item
        self._check_item(item)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call":
            self._paced_check()
            self._item = None  # its monkeypatch is undone at its teardown
        elif report.passed:
            return  # a setup or teardown that passed says nothing the call does not
        if report.outcome not in _OUTCOMES:
            return  # a rerun's attempt: the last attempt's report decides
        self.send("test", id=report.nodeid, when=report.when, outcome=report.outcome)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.check()
        self.send("end", exit=int(exitstatus))
        self._ended = True
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _code(value: Any) -> bool:
    # What runs: functions, methods, classes, properties and other descriptors.
    if value is _MISSING or value is None or isinstance(value, (str, bytes, int, float)):
        return False
    return callable(value) or hasattr(type(value), "__get__")


def _hook_impls(manager: Any) -> Iterator[Any]:
    for caller in list(vars(manager.hook).values()):
        get = getattr(caller, "get_hookimpls", None)
        if get is not None:
            yield from get()


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
        return  # no verifier asked, or an xdist worker (there is none: see below)
    option = getattr(config, "option", None)
    if option is not None and getattr(option, "dist", "no") != "no":
        # xdist's workers would run the tests where the plugin does not watch
        # them and send reports it cannot check: the tests run here instead
        # (xdist makes its session in a later pytest_configure).
        option.dist = "no"
        sys.stderr.write(
            "proctor: pytest-xdist's distribution is off, the tests run in one process\n"
        )
    config.pluginmanager.register(_REPORTER, "proctor-results-reporter")
