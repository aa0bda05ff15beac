"""The packed tree index: its codec, its checks on read-back and its diff."""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor._errors import ConfigError
from proctor.verifiers._candidate import TreeHasher, changed_paths, tree_digest
from proctor.verifiers._index import Manifest, diff, pack, unpack

_names = st.sampled_from(["a", "b", "c.txt", "d.py", "é", "\udcff"])
_paths = st.lists(_names, min_size=1, max_size=3).map("/".join)


def _prune(tree: dict[str, bytes]) -> dict[str, bytes]:
    return {p: c for p, c in tree.items() if not any(o.startswith(f"{p}/") for o in tree)}


_trees = st.dictionaries(_paths, st.binary(max_size=6), max_size=8).map(_prune)


def _manifest(tree: dict[str, bytes]) -> Manifest:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for rel, content in tree.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        hasher = TreeHasher(root, ignore=(), racy_window=0)
        digest = hasher.digest()
        manifest = hasher.manifest()
        assert manifest.digest == digest == tree_digest(root, ignore=())
        return manifest


@settings(max_examples=40, deadline=None)
@given(tree=_trees)
def test_a_manifest_round_trips_and_is_checked_against_its_digest(tree: dict[str, bytes]) -> None:
    manifest = _manifest(tree)
    back = Manifest.from_bytes(manifest.to_bytes(), manifest.digest)
    assert back.files() == manifest.files()
    assert sorted(back.paths()) == sorted(tree)
    assert len(back) == len(tree)
    assert diff(back, manifest) == ()


@settings(max_examples=40, deadline=None)
@given(before=_trees, after=_trees)
def test_the_tree_diff_is_the_diff_of_the_file_maps(
    before: dict[str, bytes], after: dict[str, bytes]
) -> None:
    old, new = _manifest(before), _manifest(after)
    assert diff(old, new) == changed_paths(old.files(), new.files())
    assert diff(new, old) == changed_paths(new.files(), old.files())


@settings(max_examples=40, deadline=None)
@given(tree=_trees.filter(bool), data=st.data())
def test_a_changed_manifest_is_refused(tree: dict[str, bytes], data: st.DataObject) -> None:
    manifest = _manifest(tree)
    raw = bytearray(zlib.decompress(manifest.to_bytes()))
    # Flip one bit past the header: a name, a digest, a length or a record's kind.
    at = data.draw(st.integers(len(b"proctor-manifest-v1\0"), len(raw) - 1))
    raw[at] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ConfigError):
        Manifest.from_bytes(zlib.compress(bytes(raw)), manifest.digest)


def test_a_manifest_of_another_tree_or_garbage_is_refused() -> None:
    one, two = _manifest({"a": b"1"}), _manifest({"a": b"2"})
    with pytest.raises(ConfigError, match="does not match"):
        Manifest.from_bytes(one.to_bytes(), two.digest)
    with pytest.raises(ConfigError, match="corrupt"):
        Manifest.from_bytes(b"not zlib", one.digest)
    with pytest.raises(ConfigError, match="header"):
        Manifest.from_bytes(zlib.compress(b"x"), one.digest)


@settings(max_examples=60)
@given(
    entries=st.dictionaries(
        st.text(min_size=1).filter(lambda n: "\0" not in n), st.binary(min_size=33, max_size=33)
    )
)
def test_pack_and_unpack_are_inverse(entries: dict[str, bytes]) -> None:
    entries = {n: entries[n] for n in entries if "/" not in n}
    node = pack(entries)
    assert unpack(node) == dict(sorted(entries.items()))
    assert pack(unpack(node)) == node


def test_the_diff_skips_equal_directories(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_text(str(i))
    hasher = TreeHasher(tmp_path, racy_window=0)
    hasher.digest()
    before = hasher.manifest()
    (tmp_path / "d7" / "f").write_text("changed")
    hasher.digest()
    after = hasher.manifest()
    # The unchanged directories are the very same packed nodes: shared, not copied.
    assert sum(before.nodes[k] is after.nodes[k] for k in before.nodes) == 49
    assert diff(before, after) == ("d7/f",)
