"""
A check's harness, its per-test results and the baseline they are judged against.

The *harness* of a command check is the set of files that decide how the check
runs rather than what it tests: for pytest, ``conftest.py`` anywhere, its ini
files, ``pyproject.toml``, ``sitecustomize.py``, ``*.pth``, and every module in
the working directory that would shadow the check's entry point (``pytest.py``,
``os.py`` under ``python -m``). :func:`harness_patterns` names them as glob
patterns; the verifier restores them from the baseline in each check's copy of
the candidate, and the scope check rejects a candidate that changed them.

A pytest check's per-test results come from proctor's results plugin inside
pytest (``_results``); :func:`parse_junit` reads pytest's JUnit XML, whose ids
those results equal. :func:`judge_against_baseline` applies the SWE-bench harness's rule: the tests
that failed at the baseline must now pass (FAIL_TO_PASS), the ones that passed
must still pass (PASS_TO_PASS), and so must the ``must_pass`` ids the task names.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import stat
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal, TypeVar

from proctor._errors import ConfigError
from proctor._fs import read_inside, remove_tree
from proctor.verifiers._candidate import DEFAULT_IGNORE, _compile, _walk, matches

__all__ = (
    "ALWAYS",
    "JUnitError",
    "Outcome",
    "collect_files",
    "escaping_links",
    "harness_patterns",
    "is_pytest",
    "judge_against_baseline",
    "keep_worst",
    "parse_junit",
    "restore",
)

Outcome = Literal["passed", "failed", "error", "skipped"]

# ----------------------------------------------------------------- (a)

# Files pytest / the interpreter read to decide how tests run, anywhere in
# the tree (rootdir/inifile discovery walks up from every arg; conftest.py
# is collected in every directory; .pth and sitecustomize run at startup
# when their dir is on sys.path, e.g. a venv inside the workspace).
ALWAYS: tuple[str, ...] = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/setup.cfg",
    "**/pyproject.toml",  # whole file: simpler and safer than diffing [tool.pytest]
    "**/sitecustomize.py",
    "**/sitecustomize.pyc",
    "**/usercustomize.py",
    "**/usercustomize.pyc",
    "**/*.pth",
    "**/pyvenv.cfg",
    "**/__pycache__/conftest.*.pyc",
    # pytest plugins of installed distributions load with pytest itself
    "**/entry_points.txt",
    # proctor's results plugin, which a same-named module earlier on sys.path would replace
    "**/proctor_results.py",
    "**/proctor_results.pyc",
    "**/proctor_results/**",
    "**/proctor_results.so",
    "**/proctor_results.*.so",
    "**/__pycache__/proctor_results.*.pyc",
)

# Modules imported while pytest starts up (before any test module).  With
# ``python -m pytest`` / ``python script.py`` the cwd / script dir is
# sys.path[0], so a file with one of these names there shadows the real one.
PYTEST_STARTUP_MODULES: tuple[str, ...] = (
    "pytest",
    "_pytest",
    "py",
    "pluggy",
    "iniconfig",
    "packaging",
    "exceptiongroup",
    "tomli",
    "colorama",
    "pygments",
)


def _module_patterns(names: Iterable[str], prefix: str = "") -> list[str]:
    out: list[str] = []
    for n in names:
        out += [
            f"{prefix}{n}.py",
            f"{prefix}{n}.pyc",
            f"{prefix}{n}/**",
            f"{prefix}{n}.*.so",
            f"{prefix}{n}.so",
        ]
    return out


def _rel_inside(path: str, workspace: Path | None, cwd: Path | None) -> str | None:
    """``path`` relative to the workspace when it lies inside, else None."""
    if workspace is None:
        return None
    ws = Path(os.path.abspath(workspace))
    p = Path(path)
    if not p.is_absolute():
        p = (cwd or ws) / p
    p = Path(os.path.abspath(p))
    if p == ws or ws in p.parents:
        return p.relative_to(ws).as_posix()
    return None


def harness_patterns(
    argv: Sequence[str],
    *,
    workspace: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    path: str | None = None,
) -> list[str]:
    """Glob patterns (relative to ``workspace``, ``**`` = any depth) of the
    files that control how ``argv`` runs.  See ``matches``.

    ``workspace``/``cwd``/``path`` (the sandbox PATH) let it add the
    executable itself when it resolves inside the workspace (``./run.sh``,
    ``.venv/bin/pytest`` -> the whole venv)."""
    # Kept whole: the patterns of one command line are gathered in one pass over its argv (the
    # executable, its interpreter, the files its options name), each step reading what the last
    # found.
    if not argv:
        raise ConfigError("a check needs a command; its argv is empty")
    ws = Path(workspace) if workspace is not None else None
    wd = Path(cwd) if cwd is not None else ws
    cwd_prefix = "./"  # anchored at the root: a bare name would match in every directory
    if ws is not None and wd is not None:
        rel = _rel_inside(str(wd), ws, ws)
        cwd_prefix = "./" if rel in (None, ".", "") else f"{rel}/"
    pats: list[str] = list(ALWAYS)

    exe = argv[0]
    base = PurePosixPath(exe).name
    args = list(argv[1:])

    # The executable: relative/absolute path, or found via PATH dirs inside
    # the workspace.
    candidates: list[str] = []
    if "/" in exe:
        candidates.append(exe)
    else:
        pats.append(f"{cwd_prefix}{base}")  # cwd-relative scripts, and a pytest.py next to it
        for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
            if d:
                candidates.append(os.path.join(d, exe))
    for c in candidates:
        rel = _rel_inside(c, ws, wd)
        if rel is None:
            continue
        pats.append(rel)
        parts = PurePosixPath(rel).parts
        # an interpreter / console script in a venv inside the workspace:
        # everything in that venv decides how the check runs.
        if len(parts) >= 3 and parts[-2] in ("bin", "Scripts"):
            pats.append(f"{PurePosixPath(*parts[:-2]).as_posix()}/**")

    is_python = re.fullmatch(r"python(\d+(\.\d+)?)?", base) is not None
    if is_python:
        # python [-opts] -m mod ... | python script.py ...: sys.path[0] is
        # the cwd (-m, -c) or the script's dir.
        i = 0
        module: str | None = None
        script: str | None = None
        while i < len(args):
            a = args[i]
            if a == "-m" and i + 1 < len(args):
                module = args[i + 1]
                break
            if a.startswith("-m") and len(a) > 2:
                module = a[2:]
                break
            if a == "-c":
                break
            if a in ("-W", "-X") and i + 1 < len(args):
                i += 2
                continue
            if not a.startswith("-"):
                script = a
                break
            i += 1
        names = set(PYTEST_STARTUP_MODULES) | set(sys.stdlib_module_names)
        if module is not None:
            names.add(module.split(".")[0])
            pats += _module_patterns(sorted(names), cwd_prefix)
            args = args[i + 2 :]
        elif script is not None:
            rel = _rel_inside(script, ws, wd)
            if rel is not None:
                pats.append(rel)
                sdir = PurePosixPath(rel).parent.as_posix()
                pats += _module_patterns(sorted(names), "./" if sdir == "." else f"{sdir}/")
            args = args[i + 1 :]
    elif base in ("pytest", "py.test"):
        # console script: sys.path[0] is the script's bin dir (covered above
        # if inside the workspace); rootdir conftest/prepend import mode can
        # still shadow pytest's lazily imported modules from test dirs.
        pats += _module_patterns(("pytest", "_pytest", "py"), cwd_prefix)

    # pytest options naming files / plugins
    for j, a in enumerate(args):
        nxt = args[j + 1] if j + 1 < len(args) else None
        if a in ("-c", "--config-file", "--confcutdir", "--rootdir") and nxt:
            rel = _rel_inside(nxt, ws, wd)
            if rel is not None:
                pats.append(rel)
        elif a.startswith(("--config-file=", "--rootdir=", "--confcutdir=")):
            rel = _rel_inside(a.split("=", 1)[1], ws, wd)
            if rel is not None:
                pats.append(rel)
        elif a == "-p" and nxt and not nxt.startswith("no:"):
            pats += _module_patterns((nxt.split(".")[0],), "**/")
        elif a.startswith("-p") and len(a) > 2 and not a[2:].startswith("no:"):
            pats += _module_patterns((a[2:].split(".")[0],), "**/")
    return list(dict.fromkeys(pats))


class JUnitError(ValueError):
    """The JUnit XML is missing, empty, malformed or not pytest's format."""


_MAX_XML_BYTES = 64 * 1024 * 1024
_RANK: Final[dict[str, int]] = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


_O = TypeVar("_O", bound=str)


def keep_worst(outcomes: dict[str, _O], test: str, outcome: _O) -> None:
    """
    Record ``outcome`` for ``test`` unless it already has a worse one: a test
    reported more than once (a failing teardown after a passing call, a test
    parametrized into one id) is as bad as its worst report.
    """
    previous = outcomes.get(test)
    if previous is None or _RANK[outcome] > _RANK[previous]:
        outcomes[test] = outcome


def _module_of(file: str) -> str:
    return re.sub(r"\.py$", "", file.replace("\\", "/")).replace("/", ".")


def _test_id(classname: str, name: str, file: str | None, root: Path | None) -> str:
    if not classname:
        # collection error of a module: name is the dotted module path
        if file:
            return file
        return name.replace(".", "/") + ".py" if name else "<unknown>"
    parts = classname.split(".")
    split: int | None = None
    if file:
        mod = _module_of(file).split(".")
        if parts[: len(mod)] == mod:
            split = len(mod)
            path = file.replace("\\", "/")
    if split is None and root is not None:
        for i in range(len(parts), 0, -1):
            cand = "/".join(parts[:i]) + ".py"
            if (root / cand).is_file():
                split, path = i, cand
                break
    if split is None:
        # heuristic: classes start with an upper-case letter
        split = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
        split = max(split, 1)
        path = "/".join(parts[:split]) + ".py"
    return "::".join([path, *parts[split:], name])


def parse_junit(
    xml: str | bytes | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
) -> dict[str, Outcome]:
    """Per-test outcomes from pytest's JUnit XML (a path, or the XML itself
    as bytes).  Ids are ``file::Class::name[param]`` like pytest node ids.
    ``root`` (the rootdir) resolves ids when the XML lacks ``file``
    (xunit2).  Duplicate ids keep the worst outcome.  Raises JUnitError."""
    if isinstance(xml, bytes):
        data = xml
        where = "<bytes>"
    else:
        where = os.fspath(xml)
        try:
            # The report is the command's: never read through a link it made, nor a FIFO.
            data = read_inside(
                os.path.dirname(where) or ".", os.path.basename(where), _MAX_XML_BYTES
            )
            if len(data) > _MAX_XML_BYTES:
                raise JUnitError(f"{where}: JUnit XML too large (over {_MAX_XML_BYTES} bytes)")
        except FileNotFoundError:
            raise JUnitError(
                f"{where}: no JUnit XML written (pytest crashed, was killed, or did not run)"
            ) from None
        except OSError as exc:
            raise JUnitError(f"{where}: cannot read JUnit XML: {exc}") from exc
    if not data.strip():
        raise JUnitError(f"{where}: JUnit XML is empty (pytest interrupted while writing?)")
    try:
        top = ET.fromstring(data)
    except ET.ParseError as exc:
        raise JUnitError(f"{where}: malformed JUnit XML: {exc}") from exc
    if top.tag == "testsuites":
        suites = list(top.iter("testsuite"))
    elif top.tag == "testsuite":
        suites = [top]
    else:
        raise JUnitError(f"{where}: root element is <{top.tag}>, expected <testsuites>/<testsuite>")
    rootp = Path(root) if root is not None else None
    out: dict[str, Outcome] = {}
    for suite in suites:
        for case in suite.iter("testcase"):
            name = case.get("name")
            if name is None:
                raise JUnitError(f"{where}: <testcase> without a name attribute")
            tid = _test_id(case.get("classname", ""), name, case.get("file"), rootp)
            tags = {child.tag for child in case}
            outcome: Outcome
            if "error" in tags:
                outcome = "error"
            elif "failure" in tags:
                outcome = "failed"
            elif "skipped" in tags:
                outcome = "skipped"
            else:
                outcome = "passed"
            keep_worst(out, tid, outcome)
    return out


# ----------------------------------------------------------------- (c)


def judge_against_baseline(
    baseline: Mapping[str, str],
    candidate: Mapping[str, str],
    must_pass: Iterable[str] = (),
) -> tuple[bool, str, list[str], list[str]]:
    """SWE-bench semantics.

    required = tests that failed (or errored) at baseline  (FAIL_TO_PASS)
             + tests that passed at baseline               (PASS_TO_PASS)
             + ``must_pass`` (task-declared; FAIL_TO_PASS unless passing at baseline)
    Baseline-skipped tests are not required.  Verdict fails when no test ran
    in the candidate, or when any required test is missing (deselected, not
    collected, renamed), skipped, failed or errored.  Returns
    ``(ok, reason, fail_to_pass, pass_to_pass)`` (sorted ids)."""
    must = set(must_pass)
    pass_to_pass = sorted(t for t, o in baseline.items() if o == "passed")
    fail_to_pass = sorted(
        {t for t, o in baseline.items() if o in ("failed", "error")}
        | {t for t in must if baseline.get(t) != "passed"}
    )
    ran = [t for t, o in candidate.items() if o != "skipped"]
    if not ran:
        return False, "no tests ran in the candidate run", fail_to_pass, pass_to_pass
    problems: dict[str, list[str]] = {"missing": [], "skipped": [], "failed": [], "error": []}
    for t in sorted({*fail_to_pass, *pass_to_pass}):
        o = candidate.get(t)
        if o is None:
            problems["missing"].append(t)
        elif o != "passed":
            problems[o if o in problems else "failed"].append(t)
    bad = {k: v for k, v in problems.items() if v}
    if bad:
        parts = []
        for kind, tests in bad.items():
            shown = ", ".join(tests[:5]) + (f" (+{len(tests) - 5} more)" if len(tests) > 5 else "")
            parts.append(f"{len(tests)} required test(s) {kind}: {shown}")
        return False, "; ".join(parts), fail_to_pass, pass_to_pass
    return (
        True,
        f"ok: {len(fail_to_pass)} fail->pass, {len(pass_to_pass)} pass->pass, {len(ran)} ran",
        fail_to_pass,
        pass_to_pass,
    )


# --------------------------------------------------------------------------- running pytest

_PYTEST_TOKEN: Final = re.compile(r"(?:^|/)(?:py\.test|pytest)$")


def is_pytest(run: Sequence[str] | str) -> bool:
    """
    Tell whether a check's command runs pytest (``pytest ...``, ``python -m pytest ...``).

    Args:
        run: the check's argv, or its shell string.
    """
    if isinstance(run, str):
        try:
            tokens = shlex.split(run)
        except ValueError:
            return False
    else:
        tokens = list(run)
    for i, token in enumerate(tokens):
        if _PYTEST_TOKEN.search(token):
            return True
        if token == "-m" and i + 1 < len(tokens) and tokens[i + 1] == "pytest":
            return True
    return False


# --------------------------------------------------------------------------- baseline files

_MAX_BASELINE_BYTES: Final = 16 * 1024 * 1024


def collect_files(
    root: Path,
    patterns: Sequence[str],
    ignore: Sequence[str] = DEFAULT_IGNORE,
    paths: Iterable[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """
    Read the regular files under ``root`` that match ``patterns``, for the journal.

    Args:
        root: the workspace at the baseline.
        patterns: the protected and harness patterns.
        ignore: paths that are not part of the candidate.
        paths: the tree's files, when they are known already (a hasher's
            :meth:`~proctor.verifiers._candidate.TreeHasher.paths`): not walked again.

    Returns:
        Relative path to ``{"data": base64 text, "exec": bool}``.

    Raises:
        ConfigError: the files come to more than 16 MiB (narrow the protected paths).
    """
    found: dict[str, dict[str, Any]] = {}
    total = 0
    wanted = _compile(tuple(patterns))
    if paths is None:
        listed: Iterable[str] = (rel for rel, _ in _walk(root, _compile(tuple(ignore))))
    else:
        listed = sorted(paths)
    for rel in listed:
        if not wanted.matches(rel):
            continue
        try:
            st = os.lstat(os.path.join(root, rel))
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        total += st.st_size
        if total > _MAX_BASELINE_BYTES:
            raise ConfigError(
                f"the protected and harness files of {root} come to more than 16 MiB; narrow"
                " [contract] protected or a check's harness"
            )
        data = Path(root, rel).read_bytes()
        found[rel] = {
            "data": base64.b64encode(data).decode("ascii"),
            "exec": bool(st.st_mode & stat.S_IXUSR),
        }
    return found


def restore(copy: Path, patterns: Sequence[str], files: Mapping[str, Mapping[str, Any]]) -> None:
    """
    Make the files of ``copy`` that match ``patterns`` exactly the baseline's.

    Every file (or link) matching the patterns is removed, then the baseline's
    are written back: a modified test, an added ``conftest.py`` or a shadowing
    ``pytest.py`` is never what runs.

    Args:
        copy: a check's private copy of the candidate.
        patterns: the protected and harness patterns.
        files: :func:`collect_files`'s map for the baseline.
    """
    for rel, entry in list(_walk(copy, _compile(()))):
        if matches(rel, patterns) and not entry.is_dir(follow_symlinks=False):
            os.unlink(entry.path)
    for rel, item in files.items():
        target = copy / rel
        parent = target.parent
        # A directory replaced by a file or a link in the candidate: make room.
        for ancestor in reversed([parent, *parent.parents]):
            if ancestor == copy or copy not in ancestor.parents:
                continue
            if ancestor.is_symlink() or (ancestor.exists() and not ancestor.is_dir()):
                ancestor.unlink()
        parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not target.is_symlink():
            # A file the candidate replaced by a directory: the baseline's file again.
            remove_tree(target)
        target.write_bytes(base64.b64decode(item["data"]))
        target.chmod(0o755 if item.get("exec") else 0o644)


def escaping_links(
    root: Path, ignore: Sequence[str] = DEFAULT_IGNORE, links: Iterable[str] | None = None
) -> list[str]:
    """
    List the symlinks under ``root`` whose target is outside it (or cannot be resolved).

    Args:
        root: a frozen candidate.
        ignore: paths that are not part of the candidate.
        links: the symlinks' relative paths, when a walk already found them
            (None: walk ``root``).

    Returns:
        ``"path -> target"`` for each, sorted.
    """
    real_root = Path(os.path.realpath(root))
    found: list[str] = []
    if links is None:
        links = [rel for rel, entry in _walk(root, _compile(tuple(ignore))) if entry.is_symlink()]
    for rel in links:
        path = os.path.join(root, rel)
        try:
            target = os.readlink(path)
        except OSError:
            continue  # no longer a link: a moved candidate, which the pin catches
        try:
            resolved = Path(os.path.realpath(path, strict=False))
        except OSError:  # a loop
            found.append(f"{rel} -> {target}")
            continue
        if resolved != real_root and real_root not in resolved.parents:
            found.append(f"{rel} -> {target}")
    return sorted(found)
