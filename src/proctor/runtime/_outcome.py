"""The result of a run and the handoff written at its end."""

from __future__ import annotations

from typing import Any

import attrs

from proctor.runtime._records import Disposition, StopReason
from proctor.verifiers._evidence import Evidence

__all__ = ("Candidate", "Handoff", "RunResult")


@attrs.frozen
class Candidate:
    """The candidate as the run left it: its tree digest."""

    digest: str


@attrs.frozen
class Handoff:
    """
    What the next owner of the work needs to know, written at the end of every run.

    Args:
        disposition: how the run ended.
        stop_reason: why.
        candidate_digest: the candidate as it stands.
        evidence: the latest evidence for that candidate, one line per check.
        open_findings: failing checks and other unresolved findings.
        spend: what the task has spent, per dimension, across all its runs.
        next_step: what should happen next.
        owner: who owns it: ``none``, ``actor``, ``operator`` or ``user``.
        answer: for an answer task, the answer that ended the run (a grounded
            final answer or a partial one); empty otherwise.
        sources: for an answer task, the sources: those the answer cites and
            that were fetched first, then every other URL fetched successfully.
        failing_output: the last lines of the output of the first required check
            that failed on that candidate ("" when none failed): why it failed,
            without opening the trace.
    """

    disposition: Disposition
    stop_reason: StopReason | None
    candidate_digest: str
    evidence: tuple[str, ...]
    open_findings: tuple[str, ...]
    spend: dict[str, float]
    next_step: str
    owner: str
    answer: str = ""
    sources: tuple[str, ...] = ()
    failing_output: str = ""


@attrs.frozen
class RunResult:
    """
    The outcome of :func:`proctor.run`.

    Args:
        run_id: the run.
        task_id: its task; spend and history belong to it.
        disposition: how it ended.
        stop_reason: why, machine-readable.
        candidate: the candidate as it stands.
        evidence: every piece of evidence the verifier produced in this run.
        handoff: the handoff written at the end.
        steps: how many steps were journaled.
        journal: the journal's location.
    """

    run_id: str
    task_id: str
    disposition: Disposition
    stop_reason: StopReason | None
    candidate: Candidate
    evidence: tuple[Evidence, ...]
    handoff: Handoff
    steps: int
    journal: str

    def summary(self) -> dict[str, Any]:
        """The outcome as plain data."""
        return {
            "run_id": self.run_id,
            "task_id": self.task_id,
            "disposition": self.disposition.value,
            "stop_reason": attrs.asdict(self.stop_reason) if self.stop_reason else None,
            "candidate": self.candidate.digest,
            "steps": self.steps,
            "answer": self.handoff.answer,
            "sources": list(self.handoff.sources),
        }
