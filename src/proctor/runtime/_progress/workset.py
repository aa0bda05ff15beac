"""
An order-independent fingerprint of a set of work items, kept up to date in O(1).

The no-progress policy asks, at every step, "is this new work?" and records a
fingerprint of all distinct work so far. Recomputing a fingerprint over the whole
history costs time proportional to the history; a :class:`WorkSet` instead adds
each item's 128-bit hash to a running sum (modulo 2**128), so an add and a
fingerprint cost the same at the first step and the hundred-thousandth, and the
fingerprint does not depend on the order in which the items arrived.

A work set can be saved as plain data (:meth:`WorkSet.snapshot`) and rebuilt
from it (:meth:`WorkSet.from_snapshot`): the item hashes in the order they
arrived, 16 bytes each, as one base64 text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from proctor._digest import canonical_json, compact_json, digest

__all__ = ("WorkSet", "naive_fingerprint")

_MODULUS = 1 << 128


def _item_hash(parts: tuple[str, ...]) -> int:
    for part in parts:
        if not isinstance(part, str):
            raise TypeError(
                f"a work item's parts must be strings, got {type(part).__name__} {part!r}"
            )
    # The same text as canonical_json(list(parts)), without its generic walk.
    nfc = [unicodedata.normalize("NFC", part) for part in parts]
    raw = compact_json(nfc).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=16).digest(), "big")


def _combine(count: int, total: int) -> str:
    return digest(f"workset:v1:{count}:{total:032x}")


@attrs.define(eq=False)
class WorkSet:
    """
    A set of work items with an order-independent fingerprint, O(1) per add.

    An item is identified by a tuple of strings (``("command", "pytest -q",
    "exit 1")``); parts are compared after Unicode NFC normalization. Two work
    sets holding the same items have the same :attr:`fingerprint`, whatever
    order the items were added in and however often each was repeated.
    """

    _hashes: set[int] = attrs.field(factory=set, init=False)
    _total: int = attrs.field(default=0, init=False)
    # The same hashes, big-endian, in the order they arrived: a snapshot is one copy.
    _raw: bytearray = attrs.field(factory=bytearray, init=False)

    def add(self, *parts: str) -> bool:
        """
        Add the item identified by ``parts``.

        Returns:
            True when the item was new; False when it was already there (and
            nothing changed).

        Raises:
            TypeError: a part is not a string.
        """
        item = _item_hash(parts)
        if item in self._hashes:
            return False
        self._hashes.add(item)
        self._total = (self._total + item) % _MODULUS
        self._raw += item.to_bytes(16, "big")
        return True

    def __contains__(self, parts: tuple[str, ...]) -> bool:
        if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
            return False
        return _item_hash(parts) in self._hashes

    def __len__(self) -> int:
        return len(self._hashes)

    @property
    def fingerprint(self) -> str:
        """The set's fingerprint: 32 hex characters, fixed for the empty set."""
        return _combine(len(self._hashes), self._total)

    def clear(self) -> None:
        """Remove every item."""
        self._hashes.clear()
        self._total = 0
        self._raw.clear()

    def copy(self) -> WorkSet:
        """Return an independent copy holding the same items."""
        other = WorkSet()
        other._hashes = set(self._hashes)
        other._total = self._total
        other._raw = bytearray(self._raw)
        return other

    def snapshot(self) -> dict[str, Any]:
        """
        Return the set as plain JSON-able data: ``items`` (how many), ``total`` (the
        running sum, 32 hex characters) and ``hashes`` (the items' hashes in the order
        they arrived, 16 bytes each, base64).
        """
        return {
            "items": len(self._hashes),
            "total": f"{self._total:032x}",
            "hashes": base64.b64encode(self._raw).decode("ascii"),
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> WorkSet:
        """
        Rebuild a work set from :meth:`snapshot`.

        Raises:
            ValueError: the data is not a work set's snapshot, or its parts disagree
                (the count or the running sum does not match the hashes).
        """
        try:
            raw = base64.b64decode(data["hashes"], validate=True)
            count, total = data["items"], int(data["total"], 16)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"not a work set snapshot: {exc}") from exc
        if len(raw) % 16 or len(raw) // 16 != count:
            raise ValueError(f"a work set snapshot of {count} items holds {len(raw)} bytes")
        hashes = {int.from_bytes(raw[i : i + 16], "big") for i in range(0, len(raw), 16)}
        if len(hashes) != count or sum(hashes) % _MODULUS != total:
            raise ValueError("a work set snapshot whose hashes do not add up to its total")
        work = cls()
        work._hashes, work._total, work._raw = hashes, total, bytearray(raw)
        return work


def naive_fingerprint(items: Iterable[tuple[str, ...]]) -> str:
    """
    Fingerprint a set of work items by sorting and hashing all of them.

    The reference for :class:`WorkSet`: two collections of items get equal naive
    fingerprints exactly when work sets holding them get equal fingerprints
    (barring hash collisions), but the cost grows with the number of items.

    Args:
        items: the items, each a tuple of strings; repeats count once.
    """
    distinct = {tuple(unicodedata.normalize("NFC", part) for part in item) for item in items}
    return digest(canonical_json(sorted(distinct)))
