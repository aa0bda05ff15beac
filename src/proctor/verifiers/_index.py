"""
The tree index: a workspace's Merkle tree as packed bytes, one pair per directory.

A directory is one :data:`Node`: the UTF-8 (``surrogateescape``) names of its
entries joined by NUL, sorted as strings, and one 33-byte record per entry in the
same order. A file's record is ``b"f"``, its 16-byte entry digest, an 8-byte stat
fingerprint (zero: its stat signature is not trusted, read it again) and 8 zero
bytes; a directory's is ``b"d"`` and its 32-byte node digest (zero: no file
beneath it, so it contributes nothing). No Python object exists per file: 100,000
files with names of ten characters come to about 4.4 MB, and a copy of the index
shares every directory that did not change.

A :class:`Manifest` is an index frozen with its root digest: what a candidate
was, compact, comparable with another in time proportional to what differs
(:func:`diff`), and serialized with :meth:`Manifest.to_bytes`; :meth:`Manifest.from_bytes`
recomputes every node digest, so a manifest read back is the tree its digest
names or is refused (content-addressed: it can be kept anywhere).

The digests are ``proctor-tree-v2``'s: a node's digest covers its entries' names
with each file's entry digest in hex and each non-empty directory's node digest
as ``d:`` and hex, exactly as :mod:`proctor.verifiers._candidate` always computed
them.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from proctor._errors import ConfigError

__all__ = (
    "Manifest",
    "StatSignature",
    "diff",
    "names_of",
    "node_digest",
    "pack",
    "recompute",
    "unpack",
)

#: One directory: (NUL-joined entry names, 33-byte records).
Node = tuple[bytes, bytes]

RECORD: Final = 33
FILE: Final = 0x66  # b"f"
DIR: Final = 0x64  # b"d"
ZERO8: Final = bytes(8)
ZERO32: Final = bytes(32)
EMPTY_DIR: Final = b"d" + ZERO32
TREE_HEADER: Final = b"proctor-tree-v2\0"
_MAGIC: Final = b"proctor-manifest-v1\0"
_LENGTHS: Final = struct.Struct("<III")


def names_of(node: Node) -> list[str]:
    """The entry names of a node, decoded at once."""
    names, records = node
    if not records:
        return []
    return names.decode("utf-8", "surrogateescape").split("\0")


def unpack(node: Node) -> dict[str, bytes]:
    """A node as an editable map of entry name to record, in its order."""
    records = node[1]
    return {name: records[i * RECORD : (i + 1) * RECORD] for i, name in enumerate(names_of(node))}


def pack(entries: Mapping[str, bytes]) -> Node:
    """The node of ``entries`` (name to record), sorted by name."""
    ordered = sorted(entries)
    return (
        "\0".join(ordered).encode("utf-8", "surrogateescape"),
        b"".join(entries[name] for name in ordered),
    )


def node_digest(node: Node) -> tuple[bytes, bool]:
    """
    Return a directory's node digest and whether anything beneath it counts.

    A directory without files beneath it has the empty tree's digest (the root's
    value then) and contributes nothing to its parent.
    """
    names, records = node
    parts = [TREE_HEADER]
    content = False
    if records:
        for i, name in enumerate(names.split(b"\0")):
            at = i * RECORD
            if records[at] == FILE:
                value = records[at + 1 : at + 17].hex()
            else:
                digest = records[at + 1 : at + 33]
                if digest == ZERO32:
                    continue
                value = "d:" + digest.hex()
            content = True
            parts.append(name + b"\0" + value.encode() + b"\0")
    return hashlib.blake2b(b"".join(parts), digest_size=32).digest(), content


def _join(head: str, name: str) -> str:
    return f"{head}/{name}" if head else name


@attrs.frozen(eq=False)
class Manifest:
    """
    A candidate's tree, frozen: its nodes by directory path and its root digest.

    Two manifests are equal when their digests are: the same tree.

    Args:
        nodes: directory path (``""`` the root) to its packed node.
        digest: the tree digest of the whole (hex).
    """

    nodes: Mapping[str, Node]
    digest: str

    def __eq__(self, other: object) -> bool:
        # The digest names the tree (the stat fingerprints are not part of it).
        return isinstance(other, Manifest) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def files(self) -> dict[str, str]:
        """Every file (and symlink): relative POSIX path to entry digest (hex)."""
        return {path: record[1:17].hex() for path, record in self.records()}

    def records(self, under: str = "") -> Iterator[tuple[str, bytes]]:
        """Every file's path and record, at and beneath directory ``under``."""
        stack = [under]
        while stack:
            rel = stack.pop()
            node = self.nodes.get(rel)
            if node is None:
                continue
            records = node[1]
            for i, name in enumerate(names_of(node)):
                record = records[i * RECORD : (i + 1) * RECORD]
                if record[0] == FILE:
                    yield _join(rel, name), record
                else:
                    stack.append(_join(rel, name))

    def paths(self) -> Iterator[str]:
        """Every file's relative path."""
        return (path for path, _ in self.records())

    def __len__(self) -> int:
        return sum(1 for _ in self.records())

    def to_bytes(self) -> bytes:
        """
        Serialize the manifest (compressed), without its stat fingerprints and
        directory digests.

        Fingerprints mean nothing outside the process that took them (a manifest
        read back trusts no stat signature); directory digests are recomputed
        from the files' when it is read back, which also checks it.
        """
        parts = [_MAGIC]
        for rel in sorted(self.nodes):
            names, records = self.nodes[rel]
            path = rel.encode("utf-8", "surrogateescape")
            # A directory's digest is recomputed when read back: not written.
            stripped = b"".join(
                records[at : at + 17] + bytes(16) if records[at] == FILE else EMPTY_DIR
                for at in range(0, len(records), RECORD)
            )
            parts.append(_LENGTHS.pack(len(path), len(names), len(stripped)))
            parts += (path, names, stripped)
        return zlib.compress(b"".join(parts), 6)

    @classmethod
    def from_bytes(cls, data: bytes, digest: str) -> Manifest:
        """
        Read a manifest back and check that it is the tree ``digest`` names.

        Raises:
            ConfigError: the data is not a manifest, or not the one of ``digest``.
        """
        try:
            raw = zlib.decompress(data)
        except zlib.error as exc:
            raise ConfigError(f"a manifest of tree {digest[:12]} is corrupt: {exc}") from None
        if not raw.startswith(_MAGIC):
            raise ConfigError(f"a manifest of tree {digest[:12]} has no manifest header")
        nodes: dict[str, Node] = {}
        at = len(_MAGIC)
        try:
            while at < len(raw):
                lp, ln, lr = _LENGTHS.unpack_from(raw, at)
                at += _LENGTHS.size
                rel = raw[at : at + lp].decode("utf-8", "surrogateescape")
                names = raw[at + lp : at + lp + ln]
                records = raw[at + lp + ln : at + lp + ln + lr]
                at += lp + ln + lr
                if len(records) != lr or lr % RECORD:
                    raise ValueError("truncated")
                nodes[rel] = (names, records)
        except (struct.error, ValueError) as exc:
            raise ConfigError(f"a manifest of tree {digest[:12]} is corrupt: {exc}") from None
        rebuilt = recompute(nodes)
        if rebuilt is None or rebuilt[0] != digest:
            raise ConfigError(
                f"a manifest does not match tree {digest[:12]}: it was changed or belongs to"
                " another tree"
            )
        return cls(rebuilt[1], digest)


def recompute(nodes: Mapping[str, Node]) -> tuple[str, dict[str, Node]] | None:
    """
    Rebuild a tree from serialized nodes: fill in every directory's node digest,
    bottom-up, and return the root digest with the filled nodes; None when the
    shape is broken or the form is not canonical (names sorted and unique, every
    directory record and every file's fingerprint zero, no node hanging loose).
    """
    computed: dict[str, bytes] = {}
    filled: dict[str, Node] = {}
    referenced = 0
    for rel in sorted(nodes, key=lambda r: r.count("/") + (1 if r else 0), reverse=True):
        names_blob, records = nodes[rel]
        names = names_of((names_blob, records))
        if len(names) != len(records) // RECORD or names != sorted(names):
            return None
        if len(set(names)) != len(names) or any(not n or "/" in n for n in names):
            return None
        rebuilt = bytearray(records)
        for i, name in enumerate(names):
            at = i * RECORD
            record = records[at : at + RECORD]
            if record == EMPTY_DIR:
                child = computed.get(_join(rel, name))
                if child is None:
                    return None
                rebuilt[at + 1 : at + RECORD] = child
                referenced += 1
            # A file's fingerprint and padding are zero in a canonical manifest.
            elif record[0] != FILE or record[17:] != bytes(16):
                return None
        node = (names_blob, bytes(rebuilt))
        filled[rel] = node
        digest, content = node_digest(node)
        computed[rel] = digest if content or not rel else ZERO32
    root = computed.get("")
    # Every directory but the root is some directory's entry: no node hangs loose.
    if root is None or referenced != len(nodes) - 1:
        return None
    return root.hex(), filled


def diff(before: Manifest, after: Manifest) -> tuple[str, ...]:
    """
    List the files added, removed or changed between two manifests, sorted.

    Directories whose node digests are equal are not entered, so the cost follows
    what differs, not the size of the trees.
    """
    changed: list[str] = []
    if before.digest == after.digest:
        return ()
    stack = [""]
    while stack:
        rel = stack.pop()
        old = unpack(before.nodes.get(rel, (b"", b"")))
        new = unpack(after.nodes.get(rel, (b"", b"")))
        for name in old.keys() | new.keys():
            path = _join(rel, name)
            a, b = old.get(name), new.get(name)
            if a is not None and b is not None and a[0] == DIR and b[0] == DIR:
                if a != b:
                    stack.append(path)
                continue
            if a is not None and b is not None and a[0] == FILE and b[0] == FILE:
                if a[1:17] != b[1:17]:
                    changed.append(path)
                continue
            for side, record in ((before, a), (after, b)):
                if record is None:
                    continue
                if record[0] == FILE:
                    changed.append(path)
                else:
                    changed.extend(p for p, _ in side.records(path))
    return tuple(sorted(set(changed)))


_SIGNED: Final = struct.Struct("<6q")


@attrs.define(eq=False)
class StatSignature:
    """
    What a full walk saw of a tree's stat fields, hashed: the pin of a candidate
    verified in place (:mod:`proctor.verifiers._pin`).

    In the walk's order (directories as a stack, entries by name), each
    directory's own stat (taken before it is listed) and each entry's name and
    stat fields (size, mtime, inode, device, ctime, mode). Two walks of a tree
    that nothing changed in between give the same :attr:`digest`; any write, a
    rename, an entry added and removed again, moves a ctime and gives another.

    Also noted: the ignored entries and special files (``hidden``), the
    symlinks, the regular files' apparent size, the newest timestamp met, and
    whether an entry vanished while walking (``broken``).
    """

    hidden: list[str] = attrs.field(factory=list)
    links: list[str] = attrs.field(factory=list)
    size: int = 0
    newest: int = 0
    broken: bool = False
    _hash: Any = attrs.field(factory=lambda: hashlib.blake2b(digest_size=32))

    @property
    def digest(self) -> bytes:
        """The signature."""
        return bytes(self._hash.digest())

    def directory(self, rel: str, path: str) -> None:
        """A directory, stat'ed now (before it is listed)."""
        st = os.lstat(path)
        self._hash.update(b"\1" + rel.encode("utf-8", "surrogateescape") + b"\0")
        self._entry(st)

    def entry(self, rel: str, name: str, st: os.stat_result) -> None:
        """A non-directory entry that is part of the candidate (or a special file)."""
        self._hash.update(name.encode("utf-8", "surrogateescape") + b"\0")
        self._entry(st)
        if stat.S_ISLNK(st.st_mode):
            self.links.append(rel)
        elif stat.S_ISREG(st.st_mode):
            self.size += st.st_size
        else:
            self.hidden.append(rel)

    def _entry(self, st: os.stat_result) -> None:
        self.newest = max(self.newest, st.st_mtime_ns, st.st_ctime_ns)
        self._hash.update(
            _SIGNED.pack(
                st.st_mtime_ns, st.st_ino, st.st_dev, st.st_ctime_ns, st.st_mode, st.st_size
            )
        )
