"""
Checks beyond commands: the change's scope, required files, a Python callable,
and judges (an LLM or a person).

Every check has a ``name``, a ``required`` flag and
``async run_check(snapshot, digest, contract_version, context) -> Evidence``.
A judge's findings can reject a candidate or add suggestions; they are never
the only evidence for completion (a contract needs a required check that is
not a judge).
"""

from __future__ import annotations

import inspect
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
import attrs

from proctor._digest import digest as text_digest
from proctor._errors import ConfigError
from proctor.runtime._tools.sandbox import SandboxSpec
from proctor.verifiers._candidate import DEFAULT_IGNORE, TreeHasher, changed_paths, matches
from proctor.verifiers._evidence import EXCERPT_CHARS, Evidence
from proctor.verifiers._index import Manifest

__all__ = (
    "Check",
    "CheckContext",
    "FileCheck",
    "JudgeCheck",
    "JudgeFindings",
    "PythonCheck",
    "ScopeCheck",
)


@attrs.frozen
class CheckContext:
    """
    What a check may know besides the snapshot.

    Args:
        baseline: the starting candidate's files (relative path -> entry digest).
        protected: glob patterns the change may not touch.
        scope: glob patterns the change must stay within (empty: anywhere).
        ignore: glob patterns left out of the candidate.
        evidence: the evidence other checks produced for this snapshot so far.
        harness: glob patterns of the command checks' harness files (see
            ``verifiers._harness``): a change there fails the scope check.
        sandbox: the sandbox command checks run in; its writable directory is the
            workspace, where each check's copy is bound. None runs them on the host.
        baseline_tests: per check, the outcome of each test at the baseline.
        baseline_files: the baseline's protected and harness files, restored in
            each command check's copy (``verifiers._harness.collect_files``).
        candidate: the snapshot's tree as the verifier hashed it (the scope and
            file checks read it instead of hashing the snapshot again).
    """

    baseline: Mapping[str, str] | Manifest = attrs.field(factory=dict)
    protected: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    evidence: tuple[Evidence, ...] = ()
    harness: tuple[str, ...] = ()
    sandbox: SandboxSpec | None = None
    baseline_tests: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    baseline_files: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    candidate: Manifest | None = None


async def _tree(snapshot: Path, digest: str, context: CheckContext) -> Manifest:
    """The snapshot's tree: the verifier's, when it is the one of ``digest``; else hashed."""
    if context.candidate is not None and context.candidate.digest == digest:
        return context.candidate
    hasher = TreeHasher(snapshot, context.ignore, racy_window=0)
    await anyio.to_thread.run_sync(hasher.digest)
    return hasher.manifest()


@runtime_checkable
class Check(Protocol):
    """What the verifier runs: a named check that turns a snapshot into evidence."""

    @property
    def name(self) -> str:
        """The check's name, unique within a contract."""
        ...

    @property
    def required(self) -> bool:
        """Whether completion needs it to pass."""
        ...

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        """Judge the snapshot."""
        ...


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[-EXCERPT_CHARS:]


def _evidence(
    check: Any, digest: str, version: str, passed: bool, report: str, started: float, **extra: Any
) -> Evidence:
    return Evidence(
        candidate_digest=digest,
        contract_version=version,
        check=check.name,
        passed=passed,
        output_digest=text_digest(report),
        excerpt=_excerpt(report),
        duration=time.monotonic() - started,
        at=time.time(),
        required=check.required,
        **extra,
    )


@attrs.frozen
class ScopeCheck:
    """
    The change since the starting candidate touches only allowed paths and no protected one.

    It catches what the controller's own fence cannot: a protected file changed by a
    command, or by anything outside the controller.

    Args:
        name: the check's name.
        required: whether completion needs it to pass.
    """

    name: str = "scope"
    required: bool = True

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        """Compare the snapshot's files with the baseline."""
        started = time.monotonic()
        tree = await _tree(snapshot, digest, context)
        baseline = context.baseline
        changed = changed_paths(
            baseline if isinstance(baseline, Manifest) else dict(baseline), tree
        )
        problems = [f"protected: {p}" for p in changed if matches(p, context.protected)]
        problems += [
            f"harness: {p} decides how a check runs; it may not be changed"
            for p in changed
            if matches(p, context.harness) and not matches(p, context.protected)
        ]
        if context.scope:
            fenced = (*context.protected, *context.harness)
            problems += [
                f"out of scope: {p}"
                for p in changed
                if not matches(p, context.scope) and not matches(p, fenced)
            ]
        report = (
            "\n".join(problems) if problems else f"{len(changed)} changed path(s), all in scope"
        )
        if changed:
            report += "\nchanged: " + ", ".join(changed[:50])
        return _evidence(
            self,
            digest,
            contract_version,
            not problems,
            report,
            started,
            findings=tuple(problems),
        )


@attrs.frozen
class FileCheck:
    """
    Required files exist, and optionally match a regular expression.

    Args:
        name: the check's name.
        paths: glob patterns; each must match at least one file of the candidate.
        pattern: a regular expression every matched file's text must contain.
        required: whether completion needs it to pass.
    """

    name: str
    paths: tuple[str, ...] = attrs.field(converter=_strings)
    pattern: str | None = None
    required: bool = True

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200:
            raise ConfigError(
                f"a check needs a non-empty string 'name' of at most 200 characters, "
                f"not {self.name!r:.60}"
            )
        if not self.paths:
            raise ConfigError(f"check {self.name!r}: 'files' needs at least one path pattern")
        if not all(isinstance(p, str) and "\0" not in p for p in self.paths):
            raise ConfigError(f"check {self.name!r}: 'files' must be a list of path patterns")
        if not isinstance(self.required, bool):
            raise ConfigError(
                f"check {self.name!r}: 'required' must be true or false, not {self.required!r}"
            )
        if self.pattern is not None and not isinstance(self.pattern, str):
            raise ConfigError(
                f"check {self.name!r}: 'pattern' must be a regular expression string, "
                f"not {self.pattern!r}"
            )
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ConfigError(
                    f"check {self.name!r}: 'pattern' is not a regular expression: {exc}"
                ) from None

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        """Look for the files in the snapshot."""
        started = time.monotonic()
        files = sorted((await _tree(snapshot, digest, context)).paths())
        problems: list[str] = []
        for pattern in self.paths:
            found = [f for f in files if matches(f, (pattern,))]
            if not found:
                problems.append(f"missing: no file matches {pattern}")
                continue
            if self.pattern is not None:
                regex = re.compile(self.pattern)
                for f in found:
                    text = (snapshot / f).read_text(encoding="utf-8", errors="replace")
                    if not regex.search(text):
                        problems.append(f"{f} does not match {self.pattern!r}")
        report = "\n".join(problems) or "every required file is there"
        return _evidence(
            self, digest, contract_version, not problems, report, started, findings=tuple(problems)
        )


@attrs.frozen
class PythonCheck:
    """
    A check written in Python: ``fn(snapshot)`` returns ``passed`` or ``(passed, report)``.

    A synchronous function runs in a worker thread; an exception fails the check
    with its traceback in the report.

    Args:
        name: the check's name.
        fn: the function (sync or async).
        required: whether completion needs it to pass.
    """

    name: str
    fn: Callable[[Path], Any]
    required: bool = True

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        """Call the function on the snapshot."""
        started = time.monotonic()
        try:
            if inspect.iscoroutinefunction(self.fn):
                outcome = await self.fn(snapshot)
            else:
                outcome = await anyio.to_thread.run_sync(self.fn, snapshot)
        except Exception:
            report = traceback.format_exc()
            return _evidence(
                self, digest, contract_version, False, report, started, findings=("raised",)
            )
        passed, report = outcome if isinstance(outcome, tuple) else (bool(outcome), "")
        return _evidence(self, digest, contract_version, bool(passed), str(report), started)


@attrs.frozen
class JudgeFindings:
    """
    What a judge says of a candidate.

    Args:
        verdict: ``accept``, ``reject`` (the candidate fails), or ``suggest``
            (acceptable, with suggestions for the handoff).
        notes: the judge's findings, one per item.
    """

    verdict: Literal["accept", "reject", "suggest"]
    notes: tuple[str, ...] = ()


JudgeFn = Callable[[Path, Sequence[Evidence]], Awaitable[JudgeFindings]]


@attrs.frozen
class JudgeCheck:
    """
    A judge (an LLM or a person) reviewing the candidate after the other checks.

    Its findings can reject a candidate or add suggestions, never be the only
    evidence for completion: a contract with judges needs a required check that
    is not one.

    Args:
        name: the check's name.
        judge: ``async judge(snapshot, evidence_so_far) -> JudgeFindings``.
        required: whether a rejection blocks completion.
    """

    name: str
    judge: JudgeFn
    required: bool = True

    async def run_check(
        self, snapshot: Path, digest: str, contract_version: str, context: CheckContext
    ) -> Evidence:
        """Ask the judge."""
        started = time.monotonic()
        try:
            findings = await self.judge(snapshot, context.evidence)
        except Exception:
            report = traceback.format_exc()
            return _evidence(
                self, digest, contract_version, False, report, started, verifier="judge"
            )
        report = "\n".join(findings.notes) or findings.verdict
        return _evidence(
            self,
            digest,
            contract_version,
            findings.verdict != "reject",
            report,
            started,
            verifier="judge",
            findings=tuple(f"{findings.verdict}: {n}" for n in findings.notes),
        )
