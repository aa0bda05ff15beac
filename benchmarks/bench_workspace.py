"""
Workspace tracking on real-sized trees, side by side with git and cp.

For each tree (a checkout of a public repository given by ``--repo`` or
``PROCTOR_BENCH_REPO``, a bare git directory or a work tree; and a synthetic tree
of 100,000 small files), in the same run:

- the digest after a step that changed nothing (``run_command true``): proctor
  watched (the kernel reports changes), proctor walking (``full=True``), and
  ``git status --porcelain`` on the same tree;
- the digest after a one-file change and after a 1,000-file change;
- run start (the first digest, a full walk and hash of every file) against
  ``git add -A && git write-tree`` on a fresh index;
- freeze (the snapshot for verification) against ``cp -a``;
- the memory the hasher holds for the tree (tracemalloc).

Run: ``python benchmarks/bench_workspace.py [--repo PATH] [--reps 5]``.
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

from proctor.verifiers._candidate import TreeHasher, freeze

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


def _git_init(tree: Path) -> None:
    who = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b"}
    env = {**os.environ, **who, "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    # No background gc: it would delete objects while cp -a copies them.
    subprocess.run(["git", "-C", str(tree), "config", "gc.auto", "0"], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(tree), "commit", "-qm", "base"], check=True, env=env)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _sh(*argv: str) -> Callable[[], object]:
    return lambda: subprocess.run(argv, check=True, capture_output=True)


def _change(tree: Path, files: list[Path], count: int, tag: str) -> None:
    for path in files[:count]:
        path.write_text(f"changed {tag}\n")


def measure_tree(tree: Path, reps: int) -> dict[str, float]:
    """Return the median seconds (and bytes, for memory) of each figure on ``tree``."""
    _git_init(tree)
    files = sorted(p for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts)[:2000]
    out: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        out.setdefault(name, []).append(value)

    for rep in range(reps):
        tracemalloc.start()
        hasher = TreeHasher(tree, watch=True)
        add("start.proctor", _time(hasher.digest))
        add("memory.proctor", tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        index = tree / ".git" / "index"
        index.unlink()
        add(
            "start.git_add_write_tree",
            _time(_sh("sh", "-c", f"cd {tree} && git add -A && git write-tree")),
        )
        add("true.proctor_watched", _time(hasher.digest))
        add("true.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("true.git_status", _time(_sh("git", "-C", str(tree), "status", "--porcelain")))
        _change(tree, files, 1, f"{rep}a")
        add("one.proctor_watched", _time(hasher.digest))
        _change(tree, files, 1, f"{rep}b")
        add("one.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("one.git_status", _time(_sh("git", "-C", str(tree), "status", "--porcelain")))
        _change(tree, files, 1000, f"{rep}c")
        add("thousand.proctor_watched", _time(hasher.digest))
        _change(tree, files, 1000, f"{rep}d")
        add("thousand.proctor_walk", _time(functools.partial(hasher.digest, full=True)))
        add("thousand.git_status", _time(_sh("git", "-C", str(tree), "status", "--porcelain")))
        hasher.close()
        with tempfile.TemporaryDirectory(dir=tree.parent) as scratch:
            add("freeze.proctor", _time(functools.partial(freeze, tree, Path(scratch) / "snap")))
            add("freeze.cp_a", _time(_sh("cp", "-a", str(tree), str(Path(scratch) / "cp"))))
    return {name: statistics.median(values) for name, values in out.items()}


def _report(title: str, figures: dict[str, float]) -> None:
    print(f"\n{title}")
    for name, value in figures.items():
        shown = (
            f"{value / 2**20:10.1f} MiB"
            if name.startswith("memory")
            else f"{value * 1000:10.1f} ms"
        )
        print(f"  {name:<28} {shown}")
    for step in ("true", "one", "thousand"):
        ratio = figures[f"{step}.proctor_watched"] / figures[f"{step}.git_status"]
        print(f"  {step}: proctor watched / git status = {ratio:.3f}")
    print(f"  start: proctor / git add+write-tree = "
          f"{figures['start.proctor'] / figures['start.git_add_write_tree']:.2f}")  # fmt: skip
    print(f"  freeze: proctor / cp -a = {figures['freeze.proctor'] / figures['freeze.cp_a']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--repo", type=Path, default=os.environ.get("PROCTOR_BENCH_REPO"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="proctor-bench-ws-") as scratch:
        base = Path(scratch)
        if args.repo is not None:
            tree = checkout(args.repo, base / "repo")
            count = sum(1 for p in tree.rglob("*") if p.is_file())
            _report(f"{args.repo.name} checkout ({count:,} files)", measure_tree(tree, args.reps))
            shutil.rmtree(tree)
        tree = synthetic_tree(base / "synthetic", args.files)
        _report(f"synthetic tree ({args.files:,} files)", measure_tree(tree, args.reps))


if __name__ == "__main__":
    main()
