"""
The one converter for everything that reaches JSON or the journal.

Proposals are a tagged union whose tag is ``type`` (``action``, ``round``,
``message``, ``complete``, ``claim``), the vocabulary of recorded trajectories.
"""

from __future__ import annotations

import enum
import json
from typing import Any, TypeVar

import cattrs
from cattrs.preconf.json import make_converter
from cattrs.strategies import configure_tagged_union

from proctor.runtime._records import (
    Claim,
    Completion,
    Message,
    Proposal,
    Round,
    ToolCall,
)

__all__ = ("PROPOSAL_TAGS", "converter", "dumps", "loads", "to_jsonable")

T = TypeVar("T")

PROPOSAL_TAGS: dict[type, str] = {
    ToolCall: "action",
    Round: "round",
    Message: "message",
    Completion: "complete",
    Claim: "claim",
}

converter = make_converter(forbid_extra_keys=True)


def _strict(kind: type, *accepted: type) -> Any:
    def structure(value: Any, cls: Any) -> Any:
        if cls is not kind and isinstance(cls, type) and issubclass(cls, enum.Enum):
            return cls(value)  # an enum whose values are strings or numbers
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}: {value!r}")
        return kind(value)

    return structure


# JSON from agents and files is checked, not coerced: "3" is no number, 1.5 no whole
# number, and a string is no list of strings.
converter.register_structure_hook(str, _strict(str, str))
converter.register_structure_hook(int, _strict(int, int))
converter.register_structure_hook(float, _strict(float, int, float))
converter.register_structure_hook(bool, _strict(bool, bool))


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return tuple(value)


converter.register_structure_hook_func(lambda t: t == tuple[str, ...], _strings)
configure_tagged_union(
    Proposal,
    converter,
    tag_generator=lambda cls: PROPOSAL_TAGS[cls],
    tag_name="type",
)


def to_jsonable(value: Any, unstructure_as: Any = None) -> Any:
    """
    Turn a record into plain JSON-able data.

    Args:
        value: the record.
        unstructure_as: the declared type, for unions (``Proposal``), so the tag is written.
    """
    return converter.unstructure(value, unstructure_as=unstructure_as)


def dumps(value: Any, unstructure_as: Any = None) -> str:
    """Serialize a record to compact JSON."""
    return json.dumps(to_jsonable(value, unstructure_as), separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes, cls: type[T] | Any) -> T:
    """
    Parse JSON into a record of ``cls``.

    Raises:
        cattrs.BaseValidationError: the data does not fit ``cls``.
    """
    result: T = converter.structure(json.loads(text), cls)
    return result


# Re-exported for callers that format validation errors.
BaseValidationError = cattrs.BaseValidationError
