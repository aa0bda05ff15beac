"""
Large contents stored once: content-addressed blobs shared by steps, events and notes.

A string of at least :data:`BLOB_MIN` characters in a step's action, its event
or a note's body is not written inline: it is written once to the ``blobs``
table, keyed by its digest (:func:`proctor._digest.digest`), and the row holds
a reference ``{"$blob": DIGEST}`` in its place. The same content in a
``write_file`` step's action, its event and its effect note is therefore stored
once, and so is an output that repeats from step to step.

A dict of the data that happens to have a ``$blob`` or ``$lit`` key is written
as ``{"$lit": {...}}``, so that no data is ever read as a reference. A row that
holds references says so (a step in its checksummed ``extra``, a note in its
``packed`` column); rows written before, or without a large string, are stored
exactly as they always were.

A blob is stored compressed (zlib, the string's UTF-8 bytes; a lone surrogate
in its ``surrogatepass`` form), so that a blob of a few kilobytes shares its
page with others instead of half filling one of its own. A blob carries its
digest as its key: a blob read back is decompressed (up to :data:`BLOB_MAX`
bytes) and hashed again, and one whose contents do not match is reported as
corrupt, with the row that refers to it, and never read as data. The
indirection stops at the journal's interface: every reader (show, export,
report, resume, the gateway) gets the contents back.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from proctor._digest import canonical_json, digest
from proctor._errors import JournalError

__all__ = (
    "BLOB_MAX",
    "BLOB_MIN",
    "pack",
    "pack_action",
    "refs",
    "unpack",
    "unpack_action",
)

#: The length, in characters, from which a string is stored as a blob. A
#: reference costs about 45 characters in the row and 80 bytes of blob row and
#: index; at 1,024 characters a string stored once costs at most 8% more, one
#: stored two or three times (a write's content) costs half or a third.
BLOB_MIN = 1024
#: The most a blob may decompress to (bytes): more is a damaged row, not data.
BLOB_MAX = 1 << 30

_REF = "$blob"
_LIT = "$lit"
# A reference as json.dumps spells it: inside a JSON string every quote is
# escaped, so this pattern matches only the structure, never a string's text.
_REF_TEXT = re.compile(r'\{"\$blob":\s*"([0-9a-f]{32})"\}')


def _encode(value: Any, blobs: dict[str, bytes]) -> Any:
    if isinstance(value, str):
        if len(value) < BLOB_MIN:
            return value
        raw = value.encode("utf-8", "surrogatepass")
        key = digest(raw)
        if key not in blobs:
            blobs[key] = zlib.compress(raw)
        return {_REF: key}
    if isinstance(value, dict):
        out = {k: _encode(v, blobs) for k, v in value.items()}
        if _REF in value or _LIT in value:
            return {_LIT: out}
        return out
    if isinstance(value, list | tuple):
        return [_encode(item, blobs) for item in value]
    return value


def pack(value: Any) -> tuple[Any, dict[str, bytes]]:
    """
    Take the large strings out of plain data.

    Returns:
        The data with each large string replaced by its reference (the data
        itself, unchanged, when it has none), and the blobs: each digest with
        its string, compressed.
    """
    blobs: dict[str, bytes] = {}
    packed = _encode(value, blobs)
    return (packed, blobs) if blobs else (value, blobs)


def pack_action(action: str | None) -> tuple[Any, dict[str, bytes]]:
    """
    Take the large strings out of a step's action (canonical JSON text).

    An action is packed only when it reads back to the very same text
    (``canonical_json`` of its data); any other text is kept as it is.

    Returns:
        The packed data and its blobs; or the action unchanged and no blobs.
    """
    if action is None or len(action) < BLOB_MIN:
        return action, {}
    try:
        data = json.loads(action)
        same = canonical_json(data) == action
    except (ValueError, TypeError, RecursionError):
        return action, {}
    if not same:
        return action, {}
    packed, blobs = pack(data)
    return (packed, blobs) if blobs else (action, blobs)


def refs(texts: Iterable[str | None]) -> set[str]:
    """The digests that packed JSON texts refer to (a superset is harmless)."""
    found: set[str] = set()
    for text in texts:
        if text is not None and "$blob" in text:
            found.update(_REF_TEXT.findall(text))
    return found


def _blob(key: str, blobs: Mapping[str, Any], where: str, seen: dict[str, str]) -> str:
    if key in seen:
        return seen[key]
    body = blobs.get(key)
    if body is None:
        raise JournalError(
            f"{where} is corrupt in the journal (it refers to content {key}, which is "
            "missing); it is not read as data"
        )
    value = None
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            inflate = zlib.decompressobj()
            raw = inflate.decompress(bytes(body), BLOB_MAX)
            if inflate.eof and not inflate.unconsumed_tail and digest(raw) == key:
                value = raw.decode("utf-8", "surrogatepass")
        except (zlib.error, UnicodeDecodeError):
            value = None
    if value is None:
        raise JournalError(
            f"{where} is corrupt in the journal (its content {key} does not match its "
            "digest); it is not read as data"
        )
    seen[key] = value
    return value


def _decode(value: Any, blobs: Mapping[str, Any], where: str, seen: dict[str, str]) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            if _REF in value:
                key = value[_REF]
                if not isinstance(key, str):
                    raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
                return _blob(key, blobs, where, seen)
            if _LIT in value:
                inner = value[_LIT]
                if not isinstance(inner, dict):
                    raise JournalError(f"{where} is corrupt in the journal: it is not read as data")
                return {k: _decode(v, blobs, where, seen) for k, v in inner.items()}
        return {k: _decode(v, blobs, where, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(item, blobs, where, seen) for item in value]
    return value


def unpack(value: Any, blobs: Mapping[str, Any], where: str) -> Any:
    """
    Put the contents back into packed data.

    Args:
        value: the packed data, as read from its row.
        blobs: the blobs read with it, by digest (compressed, as stored).
        where: the row, for an error (``step 3 of run R``).

    Raises:
        JournalError: a blob is missing, or does not match its digest.
    """
    return _decode(value, blobs, where, {})


def unpack_action(value: Any, blobs: Mapping[str, Any], where: str) -> str:
    """
    Put the contents back into a packed action: its canonical JSON text again.

    Raises:
        JournalError: a blob is missing or corrupt, or the action is not data.
    """
    try:
        return canonical_json(unpack(value, blobs, where))
    except (ValueError, TypeError) as exc:
        raise JournalError(
            f"{where} is corrupt in the journal ({exc}); it is not read as data"
        ) from None
