"""
Strict plain data at the runtime's boundaries, and the sizes that bound its work.

Everything that reaches the runtime from outside (an actor's proposal of any
kind, a recorded trajectory, a task file, a journal row read back) is plain
JSON-like data. Python's own JSON reader accepts more than the runtime can carry:
``Infinity``, ``NaN``, ``1e999`` (read as infinity), integers of any length,
strings with lone surrogates, nesting as deep as the stack goes. One check,
:func:`check_plain`, refuses all of them with a message that says where, and
:func:`loads_strict` reads JSON text under the same rules. Every boundary uses
these two, so there is one definition of what may cross.

Strings may hold the surrogates U+DC80 to U+DCFF: they are how Python carries
the bytes of a file name (or file content) that are not valid UTF-8
(``surrogateescape``), so a listed file with such a name can be named back
exactly. Any other lone surrogate is refused.

:class:`Limits` holds the sizes (each with a documented default, each
configurable by a task's ``limits``); see ``docs/robustness.md``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from proctor._errors import ConfigError, InputRefused

__all__ = (
    "DEFAULT_LIMITS",
    "INT_MAX",
    "INT_MIN",
    "Limits",
    "check_plain",
    "clip_text",
    "dumps_utf8",
    "loads_strict",
    "printable",
)

#: The integers plain data may hold: a signed 64-bit range (what SQLite stores).
INT_MAX: Final = 2**63 - 1
INT_MIN: Final = -(2**63)

# Lone surrogates other than surrogateescape's U+DC80..U+DCFF.
_BAD_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"limits.{attribute.name} must be a whole number >= 1, got {value!r}")


@attrs.frozen
class Limits:
    """
    The sizes that bound the runtime's work on what an actor sends.

    Args:
        depth: how deeply lists and objects may nest in any plain data (a
            proposal's arguments, a trajectory event, a journal row).
        argument_chars: the characters of one proposal, all its strings and
            keys together (a tool call's arguments, a message's text).
        command_chars: the characters of one ``run_command`` command.
        file_bytes: the size of the file a ``write_file`` or ``edit_file`` leaves.
        output_chars: the characters of a tool's output kept (in the journal and
            in the observation); the rest is cut from the middle, and the cut is said.
        snapshot_bytes: the size of a frozen candidate, every file counted by its
            apparent size (a sparse file by the size it claims, not the blocks it
            holds); a larger candidate is not frozen and its verification fails.
    """

    depth: int = attrs.field(default=64, validator=_positive)
    argument_chars: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    command_chars: int = attrs.field(default=64 * 1024, validator=_positive)
    file_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    output_chars: int = attrs.field(default=100_000, validator=_positive)
    snapshot_bytes: int = attrs.field(default=1024**3, validator=_positive)

    def settings(self) -> dict[str, int]:
        """The limits as plain data, for the journal."""
        return attrs.asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Limits:
        """
        Build limits from a mapping (a task file's ``[limits]`` table).

        Raises:
            ConfigError: an unknown name, or a value that is not a whole number >= 1.
        """
        names = [f.name for f in attrs.fields(cls)]
        for key in data:
            if key not in names:
                raise ConfigError(f"limits.{key}: unknown limit; accepted: {', '.join(names)}")
        return cls(**dict(data))


DEFAULT_LIMITS: Final = Limits()


def _where(crumb: tuple[Any, ...] | None) -> str:
    keys: list[Any] = []
    while crumb is not None:
        crumb, key = crumb
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else f".{key}" if out else str(key)
    return out


def _string_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        bad = _BAD_SURROGATE.search(text)
        if bad is not None:
            return (
                f"a lone surrogate U+{ord(bad.group()):04X} at character {bad.start()}: text "
                "must be valid Unicode"
            )
    return None


def check_plain(
    value: Any, limits: Limits = DEFAULT_LIMITS, where: str = "", *, max_chars: int | None = None
) -> int:
    """
    Check that ``value`` is plain data the runtime can carry, and measure it.

    Accepted: None, bool, finite floats, integers in the signed 64-bit range,
    strings without lone surrogates (U+DC80 to U+DCFF excepted, see the module),
    and lists, tuples and dicts with string keys of these, nested at most
    ``limits.depth`` deep. The walk is iterative: no depth reaches the stack.

    Args:
        value: the data.
        limits: the depth limit (and the size limit, unless ``max_chars``).
        where: where the data came from, to start the place the message names.
        max_chars: the most characters its strings and keys may hold together
            (default: ``limits.argument_chars``).

    Returns:
        The characters its strings and keys hold.

    Raises:
        InputRefused: what was wrong, where in the data, and what is accepted.
    """
    # Kept whole: one iterative walk over the data, its stack, its running total and the path a
    # refusal names go together; a quarter of it is the docstring, the contract.
    budget = limits.argument_chars if max_chars is None else max_chars
    total = 0
    root: tuple[Any, ...] | None = None if not where else (None, where)
    stack: list[tuple[Any, int, tuple[Any, ...] | None]] = [(value, 0, root)]
    while stack:
        item, depth, crumb = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise InputRefused(
                    f"an integer of {len(str(abs(item))) if abs(item) < 10**4000 else 'over 4000'}"
                    " digits: integers must be within the signed 64-bit range",
                    _where(crumb),
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InputRefused(
                    f"{item!r} is not a finite number: numbers must be finite", _where(crumb)
                )
            continue
        if isinstance(item, str):
            total += len(item)
            problem = _string_problem(item)
            if problem is not None:
                raise InputRefused(problem, _where(crumb))
        elif isinstance(item, dict | list | tuple):
            if depth >= limits.depth:
                raise InputRefused(
                    f"nested more than {limits.depth} levels deep (limits.depth)", _where(crumb)
                )
            if isinstance(item, dict):
                for key, sub in item.items():
                    if not isinstance(key, str):
                        raise InputRefused(
                            f"a {type(key).__name__} key {key!r}: object keys must be strings",
                            _where(crumb),
                        )
                    total += len(key)
                    problem = _string_problem(key)
                    if problem is not None:
                        raise InputRefused(f"a key holds {problem}", _where(crumb))
                    stack.append((sub, depth + 1, (crumb, key)))
            else:
                for index, sub in enumerate(item):
                    stack.append((sub, depth + 1, (crumb, index)))
        else:
            raise InputRefused(
                f"a {type(item).__name__} is not plain data: use null, true/false, a number, "
                "a string, a list or an object",
                _where(crumb),
            )
        if total > budget:
            raise InputRefused(
                f"more than {budget:,} characters of text: too large (limits.argument_chars)",
                where,
            )
    return total


def _parse_int(text: str) -> int:
    if len(text) > 20:
        raise InputRefused(
            f"an integer of {len(text.lstrip('-'))} digits: integers must be within the "
            "signed 64-bit range"
        )
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputRefused(f"{text[:40]} is not a finite number: numbers must be finite")
    return value


def _parse_constant(text: str) -> Any:
    raise InputRefused(f"{text} is not JSON: numbers must be finite")


def loads_strict(text: str | bytes, limits: Limits = DEFAULT_LIMITS, where: str = "") -> Any:
    """
    Read JSON text under the rules of :func:`check_plain`.

    Bytes are decoded as UTF-8 (strictly). ``NaN``, ``Infinity``, numbers that
    overflow to infinity, integers outside the signed 64-bit range, lone
    surrogates and nesting deeper than ``limits.depth`` are refused.

    Args:
        text: the JSON text.
        limits: the depth and size limits.
        where: where the text came from, for the message.

    Raises:
        InputRefused: the text is not JSON, or not JSON the runtime can carry;
            the message says what and where.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputRefused(
                f"byte {exc.start} is not UTF-8 (0x{text[exc.start]:02x}): JSON text must be UTF-8",
                where,
            ) from None
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except InputRefused as exc:
        raise InputRefused(str(exc), where) from None
    except RecursionError:
        raise InputRefused(
            f"nested more than {limits.depth} levels deep (limits.depth)", where
        ) from None
    except json.JSONDecodeError as exc:
        raise InputRefused(f"not JSON: {exc.msg} at column {exc.colno}", where) from None
    check_plain(value, limits, where, max_chars=max(limits.argument_chars, len(text)))
    return value


def clip_text(text: str, limit: int) -> str:
    """
    Keep at most about ``limit`` characters of ``text``: its head and its tail,
    with the number of characters cut from the middle said between them.

    Args:
        text: any text.
        limit: the characters to keep (at least 2).
    """
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted:,} characters omitted ...]\n{text[-half:]}"


def dumps_utf8(value: Any) -> bytes:
    """
    JSON as UTF-8 bytes for another program (an agent process, a model server).

    Non-ASCII text is written as is, unless the value holds a surrogate (a file
    name that is not UTF-8, carried by ``surrogateescape``): then every
    non-ASCII character is escaped (``\\udcff``), which is valid JSON that reads
    back to the same string.

    Args:
        value: plain data.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def printable(text: str) -> str:
    """
    ``text`` as valid Unicode, for a place that cannot carry a surrogate (a
    journal's plain text column, an MCP message): the bytes of a name that is
    not UTF-8 (``surrogateescape``) are written ``\\xff``, any other surrogate
    ``\\ud800``. Text that is valid Unicode is returned as it is.

    Args:
        text: any text.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
