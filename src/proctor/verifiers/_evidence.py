"""
Evidence: what one check said about one candidate under one contract version.

Evidence is bound to the candidate's tree digest and to the contract's version:
evidence for another digest or another version is stale and proves nothing about
the candidate as it stands.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ("EXCERPT_CHARS", "Evidence")

EXCERPT_CHARS: Final = 4000
"""The longest excerpt of a check's output kept in its evidence (its last characters)."""


@attrs.frozen
class Evidence:
    """
    The result of one check on one frozen candidate.

    Args:
        candidate_digest: the tree digest of the snapshot the check ran on.
        contract_version: the version of the acceptance contract it ran under.
        check: the check's name.
        passed: whether the check passed.
        command: the command it ran (argv, or ``("sh", "-c", text)`` for a shell string).
        exit_code: the command's exit code (negative: killed by that signal), or None
            when it never started.
        output_digest: blake2b (16 bytes, hex) of the command's whole output.
        excerpt: the end of its output (at most :data:`EXCERPT_CHARS` characters),
            followed by the verifier's notes.
        duration: seconds the check took.
        verifier: who produced the evidence.
        failing_tests: names of the failing test cases, from the check's JUnit report.
        at: wall-clock time the check finished (seconds since the epoch).
        findings: machine-readable notes (``time_limit``, ``not_started``,
            ``junit_missing``; for pytest ``results_missing``, ``results_forged``,
            ``results_unfinished``, ``results_tampered``; ...).
        required: whether completion needs this check to pass.
        env_digest: blake2b (16 bytes, hex) of the command's environment (sorted
            ``NAME=value`` lines), so that what ran can be told apart.
        tests: ``(test id, outcome)`` for each test the check ran (pytest node
            ids, from proctor's results plugin), outcome ``passed``, ``failed``,
            ``error`` or ``skipped``.
        baseline: the check ran on the task's baseline, before the actor's first
            step: the evidence says what was failing, it completes nothing.
    """

    candidate_digest: str
    contract_version: str
    check: str
    passed: bool
    command: tuple[str, ...] = ()
    exit_code: int | None = None
    output_digest: str = ""
    excerpt: str = ""
    duration: float = 0.0
    verifier: str = "proctor"
    failing_tests: tuple[str, ...] = ()
    at: float = 0.0
    findings: tuple[str, ...] = ()
    required: bool = True
    env_digest: str = ""
    tests: tuple[tuple[str, str], ...] = ()
    baseline: bool = False

    def is_for(self, digest: str, contract_version: str) -> bool:
        """
        Tell whether this evidence is about that candidate under that contract version.

        Args:
            digest: the candidate's tree digest as it stands.
            contract_version: the current contract version.
        """
        return self.candidate_digest == digest and self.contract_version == contract_version
