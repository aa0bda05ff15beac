"""
The verifier task: it judges a frozen candidate outside the actor's reach.

It receives a snapshot, computes the snapshot's digest itself and binds every
piece of evidence to that digest and to the contract's version: what it proves
is about exactly the tree it checked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import attrs
import structlog
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor.verifiers._candidate import tree_digest
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._more_checks import Check, CheckContext, JudgeCheck

__all__ = ("VerifyRequest", "VerifyResult", "run_verifier")

log = structlog.get_logger()


@attrs.frozen
class VerifyRequest:
    """
    Judge the frozen candidate at ``snapshot`` under a contract.

    Args:
        ref: matches the result to the request.
        snapshot: the frozen copy; the verifier owns it and removes it when done.
        contract_version: the contract the evidence is bound to.
        checks: the checks to run; judges run last and see the others' evidence.
        context: the baseline and the patterns the checks need.
    """

    ref: int
    snapshot: Path
    contract_version: str
    checks: tuple[Check, ...]
    context: CheckContext


@attrs.frozen
class VerifyResult:
    """The evidence for one request, bound to ``digest``, the snapshot's own digest."""

    ref: int
    digest: str
    evidence: tuple[Evidence, ...]


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


async def run_verifier(
    requests: ObjectReceiveStream[VerifyRequest],
    results: ObjectSendStream[VerifyResult],
) -> None:
    """Serve verification requests until the controller closes its side."""
    async with requests, results:
        async for request in requests:
            try:
                digest = await anyio.to_thread.run_sync(
                    tree_digest, request.snapshot, request.context.ignore
                )
                evidence: list[Evidence] = []
                ordered = sorted(request.checks, key=lambda c: isinstance(c, JudgeCheck))
                for check in ordered:
                    context = attrs.evolve(request.context, evidence=tuple(evidence))
                    evidence.append(
                        await check.run_check(
                            request.snapshot, digest, request.contract_version, context
                        )
                    )
            finally:
                with anyio.move_on_after(30, shield=True):
                    await anyio.to_thread.run_sync(_remove, request.snapshot)
            log.info(
                "verifier.judged",
                digest=digest,
                passed=all(e.passed for e in evidence if e.required),
            )
            await results.send(VerifyResult(request.ref, digest, tuple(evidence)))
