"""
The verifier task: it judges a frozen candidate outside the actor's reach.

It receives a snapshot, computes the snapshot's digest itself and binds every
piece of evidence to that digest and to the contract's version: what it proves
is about exactly the tree it checked.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import anyio
import attrs
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from proctor._fs import remove_tree
from proctor._logging import get_logger
from proctor.verifiers._candidate import freeze, snapshot_hasher
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._evidence import Evidence
from proctor.verifiers._harness import escaping_links, restore
from proctor.verifiers._index import Node
from proctor.verifiers._more_checks import Check, CheckContext, JudgeCheck, ScopeCheck
from proctor.verifiers._pin import CandidateMoved, Pin, prepare_upper

__all__ = (
    "AbandonVerify",
    "VerifierInbound",
    "VerifyRequest",
    "VerifyResult",
    "run_verifier",
    "verify_snapshot",
)

log = get_logger()


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
        known: what the freeze knew of the snapshot's files
            (:func:`~proctor.verifiers._candidate.freeze_known`): the verifier's
            digest reads only the files whose stat signature is not the one
            recorded.
        pin: the candidate is verified in place: ``snapshot`` is the workspace
            itself, held still by the pin (:mod:`proctor.verifiers._pin`), and
            is left as it is.
    """

    ref: int
    snapshot: Path
    contract_version: str
    checks: tuple[Check, ...]
    context: CheckContext
    known: Mapping[str, Node] = attrs.field(factory=dict)
    pin: Pin | None = None


@attrs.frozen
class AbandonVerify:
    """
    Stop judging request ``ref``: the run is being stopped. Its checks' commands
    are ended and the request is answered with an abandoned :class:`VerifyResult`.
    """

    ref: int


#: What the controller sends the verifier.
VerifierInbound = VerifyRequest | AbandonVerify


@attrs.frozen
class VerifyResult:
    """
    The evidence for one request, bound to ``digest``, the snapshot's own digest.

    ``abandoned``: the request was abandoned before every check ran (no evidence
    is bound then: ``digest`` is empty). ``moved``: the candidate was pinned in
    place and the workspace changed while it was judged (no evidence either:
    verify it again from a copy).
    """

    ref: int
    digest: str
    evidence: tuple[Evidence, ...]
    abandoned: bool = False
    moved: bool = False


def _remove(path: Path) -> None:
    remove_tree(path)


def _order(check: Check) -> int:
    # The scope verdict first, on the frozen candidate itself, before any code of it
    # runs; judges last, seeing the others' evidence.
    if isinstance(check, ScopeCheck):
        return 0
    return 2 if isinstance(check, JudgeCheck) else 1


def _fresh_upper(pin: Pin, check: CommandCheck, context: CheckContext) -> Path:
    """
    The upper directory of one command check's overlay over the pinned workspace:
    the ignored paths hidden, the protected and harness files the baseline's.

    Made in the system's temporary directory; remove its parent when done.
    """
    upper = Path(tempfile.mkdtemp(prefix="proctor-check-")) / "tree"
    upper.mkdir()
    workspace = context.sandbox.inside if context.sandbox is not None else pin.root
    patterns = (*context.protected, *check.harness_patterns(workspace))
    candidate = context.candidate if context.candidate is not None else pin.manifest
    stale = [check.junit] if check.junit and os.path.lexists(pin.root / check.junit) else []
    prepare_upper(upper, pin, patterns, candidate, context.baseline_files, stale)
    return upper


def _fresh_copy(snapshot: Path, check: CommandCheck, context: CheckContext, *, own: bool) -> Path:
    """
    A private copy of the candidate for one command check, its harness the baseline's.

    Made beside the snapshot, on its file system, where files can be cloned. With
    ``own`` the check is the last to look at the snapshot, which is removed after
    it: the check runs in the snapshot itself and nothing is copied.
    """
    if own:
        copy = snapshot
    else:
        copy = Path(tempfile.mkdtemp(prefix="proctor-check-", dir=snapshot.parent)) / "tree"
        freeze(snapshot, copy, context.ignore)
    workspace = context.sandbox.inside if context.sandbox is not None else snapshot
    patterns = (*context.protected, *check.harness_patterns(workspace))
    restore(copy, patterns, context.baseline_files)
    return copy


def _invalid(check: Check, digest: str, version: str, reason: str) -> Evidence:
    return Evidence(
        candidate_digest=digest,
        contract_version=version,
        check=check.name,
        passed=False,
        excerpt=f"[proctor] the candidate is invalid: {reason}",
        findings=("invalid_candidate",),
        required=check.required,
    )


async def verify_snapshot(
    snapshot: Path,
    contract_version: str,
    checks: tuple[Check, ...],
    context: CheckContext,
    *,
    baseline: bool = False,
    known: Mapping[str, Node] | None = None,
    consume: bool = False,
    pin: Pin | None = None,
) -> tuple[str, tuple[Evidence, ...]]:
    """
    Judge one frozen candidate: its digest first, then its validity and scope, then the checks.

    A symlink that leaves the candidate makes it invalid: every check fails with
    the reason and none runs. Each command check runs on its own fresh copy of
    the candidate, with the protected paths and the check's harness restored
    from the baseline, in the context's sandbox bound at the workspace's path.

    Args:
        snapshot: the frozen candidate.
        contract_version: the contract the evidence is bound to.
        checks: the checks to run.
        context: the baseline, patterns and sandbox the checks need.
        baseline: the snapshot is the task's baseline (the evidence says so).
        known: what the freeze knew of the snapshot's files: the digest reads
            only the files whose stat signature is not the one recorded.
        consume: the snapshot is removed afterwards, so the last check, when it
            is a command check, may run in it instead of a copy (otherwise the
            snapshot is left as it was).
        pin: ``snapshot`` is the workspace, pinned (its manifest is the
            candidate's tree and digest): each command check sees it through an
            overlay of its own, nothing is copied, and the pin is checked after
            the last check.

    Returns:
        The snapshot's digest and the evidence, one per check.

    Raises:
        CandidateMoved: with ``pin``, the workspace changed while it was judged.
    """
    # Kept whole: the digest, the candidate's validity, the checks in order and the
    # pin's check are one judgement of one tree.
    links: list[str]
    if pin is not None:
        digest = pin.manifest.digest
        context = attrs.evolve(context, candidate=pin.manifest)
        links = await anyio.to_thread.run_sync(escaping_links, snapshot, context.ignore, pin.links)
    else:
        hasher = snapshot_hasher(snapshot, context.ignore, known)
        digest = await anyio.to_thread.run_sync(hasher.digest)
        # The scope and file checks read the tree just hashed, not the disk again.
        context = attrs.evolve(context, candidate=hasher.manifest())
        links = await anyio.to_thread.run_sync(escaping_links, snapshot, context.ignore)
    if links:
        reason = "a symlink leaves the workspace: " + ", ".join(links[:5])
        log.info("verifier.invalid_candidate", digest=digest, links=links[:5])
        return digest, tuple(_invalid(c, digest, contract_version, reason) for c in checks)
    evidence: list[Evidence] = []
    ordered = sorted(checks, key=_order)
    for index, check in enumerate(ordered):
        here = attrs.evolve(context, evidence=tuple(evidence))
        if isinstance(check, CommandCheck) and pin is not None and context.sandbox is not None:
            upper = await anyio.to_thread.run_sync(_fresh_upper, pin, check, context)
            over = attrs.evolve(here, sandbox=attrs.evolve(context.sandbox, lower=pin.root))
            try:
                found = await check.run_check(upper, digest, contract_version, over)
            finally:
                with anyio.move_on_after(30, shield=True):
                    await anyio.to_thread.run_sync(_remove, upper.parent)
        elif isinstance(check, CommandCheck):
            own = consume and index == len(ordered) - 1
            copy = await anyio.to_thread.run_sync(
                functools.partial(_fresh_copy, snapshot, check, context, own=own)
            )
            try:
                found = await check.run_check(copy, digest, contract_version, here)
            finally:
                if not own:
                    with anyio.move_on_after(30, shield=True):
                        await anyio.to_thread.run_sync(_remove, copy.parent)
        else:
            found = await check.run_check(snapshot, digest, contract_version, here)
        evidence.append(attrs.evolve(found, baseline=True) if baseline else found)
    if pin is not None and await anyio.to_thread.run_sync(pin.moved):
        log.info("verifier.candidate_moved", digest=digest)
        raise CandidateMoved(f"the workspace changed while candidate {digest[:12]} was verified")
    return digest, tuple(evidence)


async def run_verifier(
    requests: ObjectReceiveStream[VerifierInbound],
    results: ObjectSendStream[VerifyResult],
) -> None:
    """
    Serve verification requests until the controller closes its side.

    While a request is judged the verifier keeps listening: an
    :class:`AbandonVerify` for it cancels its checks (their commands' groups
    end as a check's always do) and answers it abandoned.
    """
    async with requests, results:
        async for message in requests:
            if isinstance(message, VerifyRequest):
                await results.send(await _judge(message, requests))
            # An abandon that arrives after its result was sent has nothing to stop.


async def _judge(
    request: VerifyRequest, requests: ObjectReceiveStream[VerifierInbound]
) -> VerifyResult:
    """Judge one request, unless the controller abandons it meanwhile."""
    found: list[tuple[str, tuple[Evidence, ...]]] = []
    moved: list[CandidateMoved] = []
    async with anyio.create_task_group() as tg:

        async def judge() -> None:
            try:
                found.append(
                    await verify_snapshot(
                        request.snapshot,
                        request.contract_version,
                        request.checks,
                        request.context,
                        known=request.known,
                        consume=request.pin is None,
                        pin=request.pin,
                    )
                )
            except CandidateMoved as exc:
                moved.append(exc)
            finally:
                # A pinned candidate is the workspace itself: it is never removed.
                if request.pin is None:
                    with anyio.move_on_after(30, shield=True):
                        await anyio.to_thread.run_sync(_remove, request.snapshot)
                        if request.snapshot.parent.name.startswith("proctor-candidate-"):
                            await anyio.to_thread.run_sync(_remove, request.snapshot.parent)
            tg.cancel_scope.cancel()

        async def listen() -> None:
            # The controller sends nothing else while a request is out.
            async for message in requests:
                if isinstance(message, AbandonVerify) and message.ref == request.ref:
                    log.info("verifier.abandoned", ref=request.ref)
                    tg.cancel_scope.cancel()
                    return
            tg.cancel_scope.cancel()

        tg.start_soon(judge)
        tg.start_soon(listen)
    if moved:
        return VerifyResult(request.ref, "", (), moved=True)
    if not found:
        return VerifyResult(request.ref, "", (), abandoned=True)
    digest, evidence = found[0]
    log.info("verifier.judged", digest=digest, passed=all(e.passed for e in evidence if e.required))
    return VerifyResult(request.ref, digest, evidence)
