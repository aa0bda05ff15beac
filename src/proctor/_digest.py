"""
Canonical JSON and digests: the one owner of how proctor hashes data.

Fingerprints, policy versions, task-fact digests and the contract's version all
hash through here, so the same data gives the same hex on every host. The
runtime's normalizers and the verifiers both use it; it imports nothing of
proctor's, which keeps them from importing each other.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from typing import Any

__all__ = ("canonical_json", "compact_json", "digest")


def _canonical(value: Any) -> Any:
    # bool is an int subclass: test it first so True stays true, not 1.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"canonical JSON cannot hold {value!r}: use a finite number")
        if value.is_integer():
            # 1.0 and 1 are one number; int() also folds -0.0 into 0.
            return int(value)
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(
                    f"canonical JSON needs string keys, got {type(key).__name__} key {key!r}"
                )
            nkey = unicodedata.normalize("NFC", key)
            if nkey in out:
                raise ValueError(f"keys collide after Unicode NFC normalization: {key!r}")
            out[nkey] = _canonical(item)
        return out
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    raise TypeError(
        f"canonical JSON cannot hold a {type(value).__name__}: use None, bool, int, "
        "float, str, list, tuple or dict"
    )


def canonical_json(value: Any) -> str:
    """
    Serialize plain data to one canonical JSON text.

    Keys are sorted, separators compact, non-ASCII kept as is. Numbers have one
    form: a float with an integral value is written as an integer (``1.0`` as
    ``1``, ``-0.0`` as ``0``). Strings (keys included) are NFC-normalized, so
    two spellings of one Unicode text give one JSON. Tuples are written as lists.

    Args:
        value: None, bool, int, float, str, list, tuple or dict with str keys,
            nested freely.

    Raises:
        ValueError: a float is NaN or infinite, a dict key is not a string, or
            two keys of one dict are equal after NFC normalization.
        TypeError: a value has another type.
    """
    return _CANONICAL.encode(_canonical(value))


# Encoders made once: json.dumps makes one for each call it is given options in,
# which is half the cost of a small value's text.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_COMPACT = {
    (ascii, sort_keys): json.JSONEncoder(
        sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=ascii
    )
    for ascii in (False, True)
    for sort_keys in (False, True)
}


def compact_json(value: Any, *, ascii: bool = False, sort_keys: bool = False) -> str:
    """
    ``json.dumps(value, separators=(",", ":"))`` with ``ensure_ascii=ascii`` and
    ``sort_keys``: the same text, at about half the cost for a small value.

    Raises:
        TypeError: ``value`` is not JSON data.
        ValueError: ``value`` holds itself.
    """
    return _COMPACT[ascii, sort_keys].encode(value)


def digest(data: str | bytes) -> str:
    """
    Hash data to 32 hex characters (BLAKE2b, 16-byte digest).

    Args:
        data: bytes, or a string (hashed as UTF-8; a lone surrogate, such as
            ``surrogateescape`` leaves for a file name that is not UTF-8, is
            hashed as its three-byte form, so every string has a digest).
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()
