"""
Checks: the commands that decide whether a candidate is acceptable.

A check runs on a frozen snapshot of the candidate, outside the actor's reach, and
returns :class:`~proctor.verifiers._evidence.Evidence` bound to the snapshot's
digest and to the contract's version. A check never raises for what its command
does: a command that fails, hangs or cannot start is evidence that it did not pass.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final

import anyio
import attrs
from anyio.abc import ByteReceiveStream, Process

from proctor._digest import digest
from proctor._errors import ConfigError, SandboxUnavailableError
from proctor._fs import read_inside
from proctor._logging import get_logger
from proctor.runtime._tools.process import kill_group
from proctor.runtime._tools.sandbox import SHELL, Launch, launch, limit_note, sandbox_env
from proctor.verifiers._evidence import EXCERPT_CHARS, Evidence
from proctor.verifiers._harness import harness_patterns, is_pytest, judge_against_baseline
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._results import ResultsChannel, ResultsError

__all__ = ("CommandCheck", "contract_version")

log = get_logger()

# The output tail kept in memory: enough bytes for EXCERPT_CHARS characters of UTF-8.
_TAIL_BYTES: Final = EXCERPT_CHARS * 4
# How long to wait for the output to close once the command has exited and its
# process group is gone: a process that left the group may still hold it open.
_DRAIN_GRACE: float = 5.0
# JUnit reports larger than this are not parsed.
_JUNIT_MAX_BYTES: Final = 64 * 1024 * 1024


def _as_run(value: Sequence[str] | str) -> tuple[str, ...] | str:
    # Lists (from TOML, or written by hand) become tuples: the check is frozen and hashable.
    return value if isinstance(value, str) else tuple(value)


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


def _check_run(instance: CommandCheck, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(f"check {instance.name!r}: 'run' is an empty shell command")
        if "\0" in value:
            raise ConfigError(f"check {instance.name!r}: 'run' holds a NUL character")
        return
    if not value or not all(isinstance(arg, str) for arg in value):
        raise ConfigError(
            f"check {instance.name!r}: 'run' must be a shell string or a non-empty list of"
            f" strings (argv), not {value!r}"
        )
    if any("\0" in arg for arg in value):
        raise ConfigError(
            f"check {instance.name!r}: 'run' holds a NUL character, which no argument can carry"
        )


#: The longest check name accepted.
NAME_CHARS: Final = 200


def _check_name(instance: CommandCheck, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_CHARS or "\0" in value:
        raise ConfigError(
            f"check {str(value)[:40]!r}: 'name' must be a non-empty string of at most "
            f"{NAME_CHARS} characters, without NUL, not {value!r:.60}"
        )


def _check_exit(instance: CommandCheck, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise ConfigError(
            f"check {instance.name!r}: 'expect_exit' must be an exit code from 0 to 255, "
            f"not {value!r}"
        )


def _check_bool(instance: CommandCheck, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(
            f"check {instance.name!r}: '{attribute.name}' must be true or false, not {value!r}"
        )


def _check_time_limit(
    instance: CommandCheck, attribute: attrs.Attribute[Any], value: float
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"check {instance.name!r}: 'time_limit' must be a positive number of seconds,"
            f" not {value!r}"
        )
    if not value > 0 or math.isinf(value):
        raise ConfigError(
            f"check {instance.name!r}: 'time_limit' must be a positive number of seconds,"
            f" not {value!r}"
        )


def _check_junit(
    instance: CommandCheck, attribute: attrs.Attribute[Any], value: str | None
) -> None:
    if value is None:
        return
    if not isinstance(value, str) or "\0" in value:
        raise ConfigError(
            f"check {instance.name!r}: 'junit' must be a path string such as 'report.xml',"
            f" not {value!r}"
        )
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"check {instance.name!r}: 'junit' must be a path relative to the workspace"
            f" that stays inside it, such as 'report.xml', not {value!r}"
        )


@attrs.frozen
class CommandCheck:
    """
    A check that runs a command on the candidate and passes on the expected exit code.

    Args:
        name: the check's name, unique within a contract.
        run: the command: an argv (a list is accepted and kept as a tuple) or a shell
            string, run with ``/bin/sh -c``.
        expect_exit: the exit code that means the check passed.
        time_limit: seconds before the command's whole process group is killed and
            the check fails.
        required: whether completion needs this check to pass.
        junit: a path, relative to the candidate, of a JUnit XML report the command
            writes; the names of its failing test cases become the evidence's
            ``failing_tests``.
        harness: glob patterns added to the check's harness (the files that decide
            how it runs, restored from the baseline and fenced).
        not_harness: patterns taken out of the default harness, exactly as
            :func:`~proctor.verifiers._harness.harness_patterns` gives them
            (``**/pyproject.toml``).
        must_pass: test ids (``tests/test_x.py::test_y``) that must pass, besides
            the ones the baseline requires.

    Raises:
        ConfigError: an empty name or command, a NUL in either, an exit code
            outside 0-255, a time limit that is not a positive number, or a report
            path that leaves the candidate.
    """

    name: str = attrs.field(validator=_check_name)
    run: tuple[str, ...] | str = attrs.field(converter=_as_run, validator=_check_run)
    expect_exit: int = attrs.field(default=0, validator=_check_exit)
    time_limit: float = attrs.field(default=600.0, validator=_check_time_limit)
    required: bool = attrs.field(default=True, validator=_check_bool)
    junit: str | None = attrs.field(default=None, validator=_check_junit)
    harness: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    not_harness: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    must_pass: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @property
    def argv(self) -> tuple[str, ...]:
        """The argv the check runs (a shell string becomes ``/bin/sh -c``)."""
        return (SHELL, "-c", self.run) if isinstance(self.run, str) else self.run

    @property
    def runs_pytest(self) -> bool:
        """Whether the command runs pytest, whose per-test results the check then reads."""
        return is_pytest(self.run)

    def harness_patterns(self, workspace: Path) -> tuple[str, ...]:
        """
        Return the glob patterns of the files that decide how this check runs.

        Args:
            workspace: the workspace the check's command runs in.
        """
        argv = self.run.split() if isinstance(self.run, str) else list(self.run)
        found = harness_patterns(argv or ["sh"], workspace=workspace, cwd=workspace)
        kept = [p for p in found if p not in self.not_harness]
        return tuple(dict.fromkeys((*kept, *self.harness)))

    async def run_check(
        self,
        snapshot: Path,
        digest: str,
        contract_version: str,
        context: CheckContext | None = None,
    ) -> Evidence:
        """
        Run the command in the snapshot directory and return its evidence.

        The command runs in the context's sandbox (``snapshot`` bound at the
        workspace's own path, the sandbox's environment; nothing in it says it is
        being verified), or on the host when the context has none; in its own
        session and process group, with stdin from ``/dev/null``, stdout and stderr
        merged. A pytest command writes per-test results (``PYTEST_ADDOPTS``), which
        decide the check with the exit code: judged against the baseline's results
        when the context has them, else at least one test must have run and every
        ``must_pass`` id passed. When it exits, whatever it left running in its group is killed;
        at the time limit the whole group is killed and the check fails. A command
        that cannot start fails the check with the error in the excerpt. If
        ``junit`` is set, a stale report in the snapshot is removed before the run.

        Args:
            snapshot: the frozen candidate; the command runs there and may write there.
            digest: the snapshot's tree digest, which the evidence is bound to.
            contract_version: the contract's version, which the evidence is bound to.
            context: what other checks may use; a command needs none of it.
        """
        # Kept whole: running the command, its time limit, the JUnit report and the evidence are one
        # record of one run.
        argv = self.argv
        notes: list[str] = []
        findings: list[str] = []
        output = _Output()
        exit_code: int | None = None
        started = time.monotonic()
        report = Path(snapshot, self.junit) if self.junit is not None else None
        sandbox = context.sandbox if context is not None else None
        # Over an overlay the verifier hid a stale report already (``snapshot`` is
        # the upper directory, which holds only what this command writes).
        if report is not None and (sandbox is None or sandbox.lower is None):
            try:
                report.unlink(missing_ok=True)
            except OSError as exc:
                notes.append(f"a stale JUnit report {self.junit} could not be removed: {exc}")
        results = ResultsChannel.open() if self.runs_pytest else None
        launched: Launch | None = None
        # Everything after the results directory is made is inside the try: it is
        # removed (the key with it) whatever goes wrong.
        try:
            spawn: list[str] = list(argv)
            cwd = snapshot
            if sandbox is not None:
                spec = attrs.evolve(
                    sandbox,
                    writable=snapshot,
                    mount_at=sandbox.inside,
                    extra_writable=(
                        *sandbox.extra_writable,
                        *([results.directory] if results else []),
                    ),
                )
                if results is not None:
                    extra = results.env(sandbox_env(spec, os.environ))
                    spec = attrs.evolve(spec, env=(*spec.env, *extra.items()))
                env = sandbox_env(spec, os.environ)
                try:
                    launched = launch(argv, spec)
                except SandboxUnavailableError as exc:
                    notes.append(f"the sandbox cannot be used: {exc}")
                    findings.append("not_started")
                else:
                    spawn, cwd = launched.argv, launched.cwd
            else:
                env = {**os.environ, **(results.env(os.environ) if results else {})}
            env_digest = hashlib.blake2b(
                "\n".join(f"{k}={v}" for k, v in sorted(env.items())).encode(), digest_size=16
            ).hexdigest()
            if "not_started" not in findings:
                await self._run_process(
                    spawn,
                    cwd,
                    launched.env if launched is not None else env,
                    output,
                    notes,
                    findings,
                )
                exit_code = output.exit_code
            tests: dict[str, str] = {}
            if results is not None and "not_started" not in findings:
                try:
                    tests = results.read()
                except ResultsError as exc:
                    notes.append(f"no per-test results: {exc}")
                    findings.append(f"results_{exc.kind}")
        finally:
            if launched is not None:
                with anyio.move_on_after(5, shield=True):
                    await launched.wait_empty()
            forks_refused = launched.release() if launched is not None else False
            if results is not None:
                results.close()
        reached = limit_note(exit_code, launched is not None and launched.sandboxed, forks_refused)
        if reached is not None:
            notes.append(reached)
            findings.append("limit")
        duration = time.monotonic() - started
        ran_out = "time_limit" in findings or "not_started" in findings
        passed = not ran_out and exit_code == self.expect_exit
        failing: tuple[str, ...] = ()
        if report is not None and "not_started" not in findings:
            failing = _failing_tests(Path(snapshot), self.junit or "", notes, findings)
        if results is not None and not ran_out:
            failing = tuple(sorted(t for t, o in tests.items() if o in ("failed", "error")))
            if any(f.startswith("results_") for f in findings):
                passed = False
            else:
                baseline = (context.baseline_tests if context is not None else {}).get(self.name)
                problem = _test_problem(tests, baseline, self.must_pass, self.expect_exit)
                if problem is not None:
                    if passed:
                        notes.append(problem)
                    passed = False
                    findings.append("tests")
        evidence = Evidence(
            candidate_digest=digest,
            contract_version=contract_version,
            check=self.name,
            passed=passed,
            command=argv,
            exit_code=exit_code,
            output_digest=output.digest.hexdigest(),
            excerpt=output.excerpt(notes),
            duration=duration,
            failing_tests=failing,
            at=time.time(),
            findings=tuple(findings),
            required=self.required,
            env_digest=env_digest,
            tests=tuple(sorted(tests.items())) if results is not None else (),
        )
        log.info(
            "verifier.check_finished",
            check=self.name,
            passed=passed,
            exit_code=exit_code,
            digest=digest,
            findings=evidence.findings,
        )
        return evidence

    async def _run_process(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        output: _Output,
        notes: list[str],
        findings: list[str],
    ) -> None:
        """Start the command, supervise it within the time limit, note how it ended."""
        try:
            process = await anyio.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            notes.append(f"the command could not start: {exc}")
            findings.append("not_started")
            return
        try:
            exit_code, held_open = await self._supervise(process, output)
        finally:
            # Also reached on cancellation (the run ended): nothing is orphaned.
            kill_group(process.pid)
            with anyio.move_on_after(5, shield=True):
                await process.aclose()
        if exit_code is None:
            notes.append(
                f"time limit of {self.time_limit:g}s reached; the process group was killed"
            )
            findings.append("time_limit")
            exit_code = process.returncode
        elif held_open:
            notes.append(
                "the command exited but a process outside its group kept the output"
                " open; the output may be incomplete"
            )
            findings.append("output_held_open")
        output.exit_code = exit_code

    async def _supervise(self, process: Process, output: _Output) -> tuple[int | None, bool]:
        """
        Read the output while waiting for the command, within the time limit.

        Returns:
            The exit code (None if the time limit came first) and whether the output
            was still held open once the command had exited and its group was killed.
        """
        assert process.stdout is not None
        stdout = process.stdout
        drained = anyio.Event()
        exit_code: int | None = None

        async def drain() -> None:
            await output.read(stdout)
            drained.set()

        with anyio.move_on_after(self.time_limit):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                exit_code = await process.wait()
                # Children left in the group would keep the output open.
                kill_group(process.pid)
                with anyio.move_on_after(_DRAIN_GRACE):
                    await drained.wait()
                tg.cancel_scope.cancel()
        return exit_code, exit_code is not None and not drained.is_set()


@attrs.define(eq=False)
class _Output:
    """A command's output: a digest of all of it and a bounded tail."""

    digest: hashlib.blake2b = attrs.field(factory=lambda: hashlib.blake2b(digest_size=16))
    tail: bytearray = attrs.field(factory=bytearray)
    exit_code: int | None = None

    async def read(self, stream: ByteReceiveStream) -> None:
        async for chunk in stream:
            self.digest.update(chunk)
            self.tail += chunk
            if len(self.tail) > 2 * _TAIL_BYTES:
                del self.tail[:-_TAIL_BYTES]

    def excerpt(self, notes: Sequence[str]) -> str:
        """Return the end of the output, then the verifier's notes, within EXCERPT_CHARS."""
        text = self.tail[-_TAIL_BYTES:].decode("utf-8", errors="replace")
        if not notes:
            return text[-EXCERPT_CHARS:]
        note_text = "\n".join(f"[proctor] {note}" for note in notes)[:EXCERPT_CHARS]
        room = EXCERPT_CHARS - len(note_text) - 1
        text = text.rstrip("\n")[-room:] if room > 0 else ""
        return f"{text}\n{note_text}" if text else note_text


def _failing_tests(
    snapshot: Path, name: str, notes: list[str], findings: list[str]
) -> tuple[str, ...]:
    """Read the names of the failing test cases from a JUnit XML report."""
    try:
        # Never through a link: the command wrote it, the host reads it.
        data = read_inside(snapshot, name, _JUNIT_MAX_BYTES)
    except FileNotFoundError:
        # Not written (an overlay's whiteout hides a stale one; a link or a FIFO
        # is not a report).
        notes.append(f"the JUnit report {name} was not written")
        findings.append("junit_missing")
        return ()
    except OSError as exc:
        notes.append(f"the JUnit report {name} could not be read: {exc}")
        findings.append("junit_invalid")
        return ()
    if len(data) > _JUNIT_MAX_BYTES:
        notes.append(
            f"the JUnit report {name} is too large to read (over {_JUNIT_MAX_BYTES} bytes)"
        )
        findings.append("junit_invalid")
        return ()
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        notes.append(f"the JUnit report {name} could not be parsed: {exc}")
        findings.append("junit_invalid")
        return ()
    failing: set[str] = set()
    for case in root.iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        test = case.get("name", "")
        classname = case.get("classname", "")
        failing.add(f"{classname}.{test}" if classname else test)
    return tuple(sorted(failing))


def _test_problem(
    tests: dict[str, str], baseline: Any, must_pass: Sequence[str], expect_exit: int
) -> str | None:
    """Say why the per-test results do not pass, or None."""
    if baseline is not None:
        ok, reason, _, _ = judge_against_baseline(baseline, tests, must_pass)
        return None if ok else f"against the baseline: {reason}"
    ran = [t for t, o in tests.items() if o != "skipped"]
    if not ran:
        return "no test ran (everything was skipped, deselected or not collected)"
    missing = [t for t in must_pass if tests.get(t) != "passed"]
    if missing:
        return f"must_pass test(s) did not pass: {', '.join(missing[:5])}"
    failed = sorted(t for t, o in tests.items() if o in ("failed", "error"))
    if failed and expect_exit == 0:
        # pytest exits 1 when a test fails; an exit of 0 then was not pytest's
        # (the code under test can end the process itself). Without a baseline
        # every test that ran is required.
        shown = ", ".join(failed[:5]) + (f" (+{len(failed) - 5} more)" if len(failed) > 5 else "")
        return f"{len(failed)} test(s) failed or errored: {shown}"
    return None


def contract_version(payload: Any) -> str:
    """
    Compute the version of an acceptance contract from its content.

    The version is a blake2b digest (16 bytes, hex) of the canonical JSON of the
    content: sorted keys, compact separators. Any change to the content changes it;
    key order and list-versus-tuple do not.

    Args:
        payload: the contract's content as JSON-able data (a dict of checks,
            protected paths, ...).

    Raises:
        ConfigError: the payload is not JSON-able (or holds NaN or infinity).
    """
    try:
        text = json.dumps(
            payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"the contract's content is not JSON-able: {exc}") from exc
    # Plain sorted JSON, not canonical_json: existing contract versions keep their bytes.
    return digest(text)
