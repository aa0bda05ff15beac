"""
Workspace tracking on real-sized trees, side by side with git and cp.

For each tree (a checkout of a public repository given by ``--repo`` or
``PROCTOR_BENCH_REPO``, a bare git directory or a work tree; and a synthetic tree
of 100,000 small files), one tree at a time, in the same run:

- the digest after a step that changed nothing (``run_command true``): proctor
  watched (the kernel reports changes), proctor walking (``full=True``), and
  ``git status --porcelain`` on the same tree;
- the digest after a one-file change and after a 1,000-file change;
- run start (the first digest, a full walk and hash of every file, with the
  kernel's watches set) against ``git add -A && git write-tree`` on a fresh
  index; and the baseline's manifest (compressed, what the journal keeps);
- freeze (the snapshot for verification, on the workspace's file system) against
  ``cp -a``, the verifier's digest of the snapshot (reusing what the tree knew,
  against reading every byte as it used to), and removing the snapshot;
- one whole verification with a command check (``true`` in the sandbox): in
  place (the workspace pinned, the check over an overlay) against from a copy
  (freeze, the verifier's digest, the check, removal), each after the
  controller's full digest;
- with ``--reflink-dir DIR`` (a directory on a file system with reflink, e.g. a
  loop-mounted xfs), the same freeze there against ``cp -a --reflink=always``;
- the memory the hasher holds for the tree (tracemalloc: its index and the
  watcher's map of watched directories).

Run: ``python benchmarks/bench_workspace.py [--repo PATH] [--reps 3] [--reflink-dir DIR]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import anyio

from proctor.runtime._tools.sandbox import SandboxSpec, overlay_available
from proctor.verifiers._candidate import (
    DEFAULT_IGNORE,
    TreeHasher,
    freeze_known,
    snapshot_directory,
    snapshot_hasher,
)
from proctor.verifiers._checks import CommandCheck
from proctor.verifiers._more_checks import CheckContext
from proctor.verifiers._pin import pinned_digest
from proctor.verifiers._verifier import verify_snapshot

__all__ = ("main", "measure_tree", "synthetic_tree")


def synthetic_tree(root: Path, files: int = 100_000, per_dir: int = 100) -> Path:
    """Write ``files`` small files, ``per_dir`` to a directory, two levels deep."""
    for i in range(files):
        directory = root / f"d{i // (per_dir * 100)}" / f"e{(i // per_dir) % 100}"
        if i % per_dir == 0:
            directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i}.txt").write_text(f"file {i}\n")
    return root


def checkout(repo: Path, into: Path) -> Path:
    """Lay out HEAD of a git repository (bare or not) as a plain tree in ``into``."""
    git_dir = repo / ".git" if (repo / ".git").is_dir() else repo
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _git(tree: Path) -> tuple[str, ...]:
    # The repository lives beside the tree: cp -a and the freeze copy the same files.
    return ("git", f"--git-dir={tree.parent / (tree.name + '.git')}", f"--work-tree={tree}")


def _git_init(tree: Path) -> None:
    who = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b"}
    env = {**os.environ, **who, "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run([*_git(tree), "init", "-q"], check=True)
    subprocess.run([*_git(tree), "config", "gc.auto", "0"], check=True)
    subprocess.run([*_git(tree), "add", "-A"], check=True)
    subprocess.run([*_git(tree), "commit", "-qm", "base"], check=True, env=env)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _sh(*argv: str) -> Callable[[], object]:
    return lambda: subprocess.run(argv, check=True, capture_output=True)


def _change(tree: Path, files: list[Path], count: int, tag: str) -> None:
    for path in files[:count]:
        path.write_text(f"changed {tag}\n")


def _freeze_figures(
    tree: Path, hasher: TreeHasher, add: Callable[[str, float], None], prefix: str = "freeze"
) -> None:
    """Freeze ``tree``, hash the snapshot both ways, remove it; against ``cp -a``."""
    hasher.digest(full=True)
    manifest = hasher.manifest()
    parent = snapshot_directory(tree)
    snapshot = parent / "tree"
    start = time.perf_counter()
    known = freeze_known(tree, snapshot, known=manifest)
    add(f"{prefix}.proctor", time.perf_counter() - start)
    if prefix == "freeze":
        verifier = snapshot_hasher(snapshot, known=known)
        add("verify.digest_reusing", _time(verifier.digest))
        add("verify.files_read", verifier.statistics().hashed)
        add("verify.digest_reading_all", _time(TreeHasher(snapshot, racy_window=0).digest))
    add(f"{prefix}.cleanup", _time(functools.partial(shutil.rmtree, parent)))
    copy = Path(tempfile.mkdtemp(dir=parent.parent, prefix="bench-cp-"))
    reflink = ("--reflink=always",) if prefix == "reflink" else ()
    add(f"{prefix}.cp_a", _time(_sh("cp", "-a", *reflink, str(tree), str(copy / "cp"))))
    add(f"{prefix}.cp_cleanup", _time(functools.partial(shutil.rmtree, copy)))


def _verification_figures(
    tree: Path, hasher: TreeHasher, add: Callable[[str, float], None]
) -> None:
    """
    One whole verification with one command check (``true``, in the sandbox), in
    place against from a copy; each with the controller's full digest before it.
    """
    if overlay_available() is not None:
        return
    check = CommandCheck(name="true", run=["true"])
    context = CheckContext(sandbox=SandboxSpec(writable=tree), ignore=DEFAULT_IGNORE)
    # Left alone a moment, as a tree is between an agent's last edit and its claim.
    time.sleep(0.2)

    def in_place() -> None:
        start = time.perf_counter()
        _, pin = pinned_digest(hasher)
        add("verify.pinned_digest", time.perf_counter() - start)
        assert pin is not None
        start = time.perf_counter()
        anyio.run(functools.partial(verify_snapshot, tree, "v", (check,), context, pin=pin))
        add("verify.in_place_checks", time.perf_counter() - start)

    def copied() -> None:
        hasher.digest(full=True)
        parent = snapshot_directory(tree)
        known = freeze_known(tree, parent / "tree", DEFAULT_IGNORE, None, hasher.manifest())
        verify = functools.partial(
            verify_snapshot, parent / "tree", "v", (check,), context, known=known, consume=True
        )
        anyio.run(verify)
        shutil.rmtree(parent)

    add("verify.in_place", _time(in_place))
    add("verify.copied", _time(copied))


def measure_tree(tree: Path, reps: int, reflink_dir: Path | None = None) -> dict[str, float]:
    """Return the median seconds (and bytes, for memory) of each figure on ``tree``."""
    # Kept whole: one repetition is one sequence of changes and measurements on one tree,
    # each figure taken next to its peer's.
    _git_init(tree)
    files = sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts)[:2000]
    status = _sh(*_git(tree), "status", "--porcelain")
    git_dir = tree.parent / (tree.name + ".git")
    out: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        out.setdefault(name, []).append(value)

    for rep in range(reps):
        # Memory first, on a hasher of its own: tracemalloc slows every allocation, so
        # the start is timed without it.
        tracemalloc.start()
        measured = TreeHasher(tree, watch=True)
        measured.digest()
        add("memory.proctor", tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        measured.close()
        del measured
        hasher = TreeHasher(tree, watch=True)
        add("start.proctor", _time(hasher.digest))
        manifest = hasher.manifest()
        add("start.manifest", _time(manifest.to_bytes))
        add("start.manifest_bytes", len(manifest.to_bytes()))
        (git_dir / "index").unlink()
        git = " ".join(_git(tree))
        add("start.git_add_write_tree", _time(_sh("sh", "-c", f"{git} add -A && {git} write-tree")))
        add("true.proctor_watched", _time(hasher.digest))
        add("true.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("true.git_status", _time(status))
        _change(tree, files, 1, f"{rep}a")
        add("one.proctor_watched", _time(hasher.digest))
        _change(tree, files, 1, f"{rep}b")
        add("one.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("one.git_status", _time(status))
        _change(tree, files, 1000, f"{rep}c")
        add("thousand.proctor_watched", _time(hasher.digest))
        _change(tree, files, 1000, f"{rep}d")
        add("thousand.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("thousand.git_status", _time(status))
        _freeze_figures(tree, hasher, add)
        _verification_figures(tree, hasher, add)
        hasher.close()
    if reflink_dir is not None:
        there = Path(tempfile.mkdtemp(dir=reflink_dir, prefix="bench-ws-")) / "tree"
        subprocess.run(["cp", "-a", str(tree), str(there)], check=True)
        hasher = TreeHasher(there)
        hasher.digest()
        for _ in range(reps):
            _freeze_figures(there, hasher, add, prefix="reflink")
        shutil.rmtree(there.parent)
    shutil.rmtree(git_dir)
    return {name: statistics.median(values) for name, values in out.items()}


def _report(title: str, figures: dict[str, float]) -> None:
    print(f"\n{title}")
    for name, value in figures.items():
        if name.startswith("memory"):
            shown = f"{value / 2**20:10.1f} MiB"
        elif name.endswith("bytes"):
            shown = f"{value / 1024:10.1f} KiB"
        elif name.endswith("files_read"):
            shown = f"{value:10.0f} files"
        else:
            shown = f"{value * 1000:10.1f} ms"
        print(f"  {name:<28} {shown}")
    for step in ("true", "one", "thousand"):
        ratio = figures[f"{step}.proctor_watched"] / figures[f"{step}.git_status"]
        print(f"  {step}: proctor watched / git status = {ratio:.4f}")
    print(f"  start: proctor / git add+write-tree = "
          f"{figures['start.proctor'] / figures['start.git_add_write_tree']:.2f}")  # fmt: skip
    print(f"  freeze: proctor / cp -a = {figures['freeze.proctor'] / figures['freeze.cp_a']:.2f}")
    if "verify.in_place" in figures:
        print(f"  verification: in place / from a copy = "
              f"{figures['verify.in_place'] / figures['verify.copied']:.3f}")  # fmt: skip
    if "reflink.proctor" in figures:
        print(f"  reflink freeze: proctor / cp -a --reflink=always = "
              f"{figures['reflink.proctor'] / figures['reflink.cp_a']:.2f}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--repo", type=Path, default=os.environ.get("PROCTOR_BENCH_REPO"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--reflink-dir", type=Path, default=None)
    parser.add_argument("--only", choices=("repo", "synthetic"), default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="proctor-bench-ws-") as scratch:
        base = Path(scratch)
        if args.repo is not None and args.only != "synthetic":
            tree = checkout(args.repo, base / "repo")
            count = sum(1 for p in tree.rglob("*") if p.is_file())
            figures = measure_tree(tree, args.reps, args.reflink_dir)
            _report(f"{args.repo.name} checkout ({count:,} files)", figures)
            shutil.rmtree(tree)
        if args.only != "repo":
            tree = synthetic_tree(base / "synthetic", args.files)
            figures = measure_tree(tree, args.reps, args.reflink_dir)
            _report(f"synthetic tree ({args.files:,} files)", figures)


if __name__ == "__main__":
    main()
