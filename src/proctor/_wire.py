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

__all__ = (
    "PROPOSAL_TAGS",
    "converter",
    "dumps",
    "expect_bool",
    "expect_int",
    "expect_number",
    "expect_str",
    "expect_strings",
    "loads",
    "to_jsonable",
)

T = TypeVar("T")

PROPOSAL_TAGS: dict[type, str] = {
    ToolCall: "action",
    Round: "round",
    Message: "message",
    Completion: "complete",
    Claim: "claim",
}

converter = make_converter(forbid_extra_keys=True)


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def expect_str(value: Any, where: str = "the value") -> str:
    """
    Return ``value`` if it is a JSON string.

    The one strict check of JSON from agents, files and the journal: nothing is
    coerced ("3" is no number, 1.5 no whole number, true no number, a string no
    list of strings). Each ``expect_*`` raises ``TypeError("<where> must be ...,
    got <the value as JSON>")``; callers add where it was (a line, a field).

    Raises:
        TypeError: it is not.
    """
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a string, got {_show(value)}")
    return value


def expect_int(value: Any, where: str = "the value") -> int:
    """Return ``value`` if it is a whole JSON number (not a boolean); see :func:`expect_str`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} must be a whole number, got {_show(value)}")
    return value


def expect_number(value: Any, where: str = "the value") -> float:
    """Return ``value`` as a float if it is a JSON number, not a boolean; see :func:`expect_str`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where} must be a number, got {_show(value)}")
    return float(value)


def expect_bool(value: Any, where: str = "the value") -> bool:
    """Return ``value`` if it is true or false; see :func:`expect_str`."""
    if not isinstance(value, bool):
        raise TypeError(f"{where} must be true or false, got {_show(value)}")
    return value


def expect_strings(value: Any, where: str = "the value") -> tuple[str, ...]:
    """Return ``value`` as a tuple if it is a JSON list of strings; see :func:`expect_str`."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{where} must be a list of strings, got {_show(value)}")
    return tuple(value)


_EXPECT: dict[type, Any] = {
    str: expect_str,
    int: expect_int,
    float: expect_number,
    bool: expect_bool,
}


def _strict(kind: type) -> Any:
    check = _EXPECT[kind]

    def structure(value: Any, cls: Any) -> Any:
        if cls is not kind and isinstance(cls, type) and issubclass(cls, enum.Enum):
            return cls(value)  # an enum whose values are strings or numbers
        return check(value)

    return structure


# JSON from agents and files is checked, not coerced.
converter.register_structure_hook(str, _strict(str))
converter.register_structure_hook(int, _strict(int))
converter.register_structure_hook(float, _strict(float))
converter.register_structure_hook(bool, _strict(bool))


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    return expect_strings(value)


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
