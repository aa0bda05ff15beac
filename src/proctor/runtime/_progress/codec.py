"""
The decision core's snapshot codecs: checked plain-data fields, 64-bit hashes packed as text.

A snapshot (:meth:`~proctor.runtime._progress.judge.Judge.snapshot`) is JSON;
loading one back checks every field's type (``as_*``: a wrong one raises
``TypeError`` or ``ValueError``, for which the judge refuses the snapshot), and
the judge's many 64-bit hashes of actions and outcomes travel as one base64
text each (:func:`pack64`, :func:`unpack64`). :func:`hash64` is the stable hash
they are made with. Pure functions, no state.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from proctor._wire import expect_bool, expect_int, expect_str, expect_strings

__all__ = (
    "as_bool",
    "as_int",
    "as_ints",
    "as_opt_str",
    "as_pairs",
    "as_str",
    "as_strs",
    "hash64",
    "pack64",
    "unpack64",
)


def as_int(value: Any) -> int:
    """A snapshot field that must be a whole number."""
    return expect_int(value, "a snapshot field")


def as_str(value: Any) -> str:
    """A snapshot field that must be a text."""
    return expect_str(value, "a snapshot field")


def as_opt_str(value: Any) -> str | None:
    """A snapshot field that must be a text or null."""
    return None if value is None else as_str(value)


def as_bool(value: Any) -> bool:
    """A snapshot field that must be true or false."""
    return expect_bool(value, "a snapshot field")


def as_strs(value: Any) -> list[str]:
    """A snapshot field that must be a list of texts."""
    if not isinstance(value, list):  # a snapshot is JSON: lists, never tuples
        raise TypeError(f"a snapshot field must be a list of strings, got {str(value)[:80]}")
    return list(expect_strings(value, "a snapshot field"))


def as_ints(value: Any) -> list[int]:
    """A snapshot field that must be a list of whole numbers."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of whole numbers, got {str(value)[:80]}")
    return [as_int(item) for item in value]


def as_pairs(value: Any, size: int) -> list[list[Any]]:
    """A snapshot field that must be a list of ``size``-item lists."""
    if not isinstance(value, list) or not all(
        isinstance(v, list) and len(v) == size for v in value
    ):
        raise ValueError(f"expected a list of {size}-item lists, got {str(value)[:80]}")
    return value


def hash64(text: str) -> int:
    """A stable 64-bit hash of a text (Python's own ``hash`` changes between processes)."""
    raw = text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def pack64(values: Sequence[int]) -> str:
    """Unsigned 64-bit integers as one base64 text, big-endian."""
    packed = array("Q", values)
    if packed.itemsize != 8:  # pragma: no cover - every platform CPython supports
        raise RuntimeError("array('Q') is not 64 bits wide here")
    if sys.byteorder == "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack64(text: str) -> list[int]:
    """The unsigned 64-bit integers :func:`pack64` wrote."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 8:
        raise ValueError(f"{len(raw)} bytes is not a whole number of 64-bit integers")
    values = array("Q")
    values.frombytes(raw)
    if sys.byteorder == "little":
        values.byteswap()
    return values.tolist()
