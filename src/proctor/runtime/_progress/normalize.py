"""
Normalization and fingerprints for the no-progress policy.

The controller must tell new work from repeated work, even when an agent spells
the same command differently or a tool's output carries volatile noise
(timestamps, ids, pids, durations, temporary paths, ephemeral ports). Everything
here is a pure function of its input: the same input gives the same string on
every host and in every process, so fingerprints can be journaled and compared
when a recorded trajectory is replayed.

Placeholders written by :func:`strip_volatile`: ``<time>``, ``<uuid>``, ``<hex>``,
``<addr>``, ``<pid>``, ``<dur>``, ``<tmp>``, ``<port>``. Meaningful numbers stay:
line and column numbers, counts, exit codes, versions, memory sizes.

Also here: a call's normalized action (:func:`normalized_action`, its identity
for repetition checks), and :func:`is_infrastructure_error`, which tells a rate
limit, a server error or an unreachable host from the agent's own failure.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from proctor._digest import canonical_json, digest
from proctor.runtime._records import ToolCall, ToolResult, ToolStatus
from proctor.runtime._tools.spec import ToolSpec, spec_for

__all__ = (
    "Declarations",
    "action_key",
    "collapse_whitespace",
    "failure_signature",
    "fingerprint",
    "is_infrastructure_error",
    "normalize_command",
    "normalize_output",
    "normalize_path",
    "normalized_action",
    "normalized_args",
    "prepare",
    "response_fingerprint",
    "split_command",
    "strip_volatile",
)


def collapse_whitespace(text: str) -> str:
    """
    Turn every run of whitespace (newlines included) into one space and strip the ends.

    Args:
        text: any text.
    """
    return " ".join(text.split())


# ---------------------------------------------------------------------------
# Volatile fields
#
# Each pattern sees the text left by the ones before it. Boundaries look at the
# adjacent character, and an adjacent placeholder counts as the word it replaced
# (``_NOT_AFTER`` / ``_NOT_BEFORE``), so a replacement never opens a new match
# for a pattern that ran earlier: that is what makes strip_volatile idempotent.

_NOT_AFTER = r"(?<!\w)(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)"
_NOT_BEFORE = r"(?!\w)(?!<[a-z]{3,4}>)"

# Characters that continue a path component (besides word characters).
_PATH_NOT_AFTER = r"(?<![\w.~/\\-])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)"
_PATH_NOT_BEFORE = r"(?![\w.~-])(?!<[a-z]{3,4}>)"

_TMP_ROOT_RE = re.compile(
    _PATH_NOT_AFTER + r"(?:"
    # macOS per-user temp dirs: /var/folders/xx/<random>/T
    r"(?:/private)?/var/folders/[\w.-]+/[\w.-]+(?:/[TC](?![\w.~-]))?"
    r"|(?:/private)?(?:/var)?/tmp"
    r"|(?i:[a-z]:[\\/]+(?:users[\\/]+[^\\/\s\"']+[\\/]+appdata[\\/]+local[\\/]+temp"
    r"|windows[\\/]+temp))"
    r")" + _PATH_NOT_BEFORE
)
_TMP_PART_RE = re.compile(
    r"(?<![\w.~-])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)(?:"
    r"pytest-of-[\w.-]+[\\/]+pytest-(?:\d+|current)"
    # tempfile's random names: "tmp" and eight characters of [a-z0-9_], or
    # similar names of another length holding a digit or an underscore.
    r"|tmp(?:[a-z0-9_]{8}|(?=[a-z0-9_]*[0-9_])[a-z0-9_]{6,16})"
    # A suffix may follow a random name ("tmpab12cd34.py"): "." is allowed after.
    r")(?![\w~-])(?!<[a-z]{3,4}>)"
)
_TMP_RUN_RE = re.compile(r"<tmp>(?:[\\/]+<tmp>)+")

_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
)
_WEEKDAY = (
    r"(?:Mon(?:day)?|Tue(?:s(?:day)?)?|Wed(?:nesday)?|Thu(?:rs(?:day)?)?|Fri(?:day)?"
    r"|Sat(?:urday)?|Sun(?:day)?)"
)
_CLOCK = r"\d{1,2}:[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?(?:\s?[AP]M)?"
_ZONE = (
    r"(?:UTC|GMT|[ECMPA][SD]T|CES?T|EES?T|WES?T|BST|IST|JST|KST|MSK|HST|AK[SD]T"
    r"|AE[SD]T|NZ[SD]T|[+-]\d{2}:?\d{2})"
)
_LOG_DATE_RE = re.compile(
    _NOT_AFTER + r"(?:"
    # date(1) and ctime: "Mon Nov 30 01:30:09 UTC 2026"; syslog: "Nov 30 01:30:09"
    rf"(?:{_WEEKDAY},?\s+)?{_MONTH}\s+\d{{1,2}},?\s+(?:\d{{4}},?\s+)?{_CLOCK}"
    rf"(?:\s+{_ZONE})?(?:\s+\d{{4}})?"
    # RFC 2822 / HTTP: "Mon, 30 Nov 2026 01:30:09 GMT"
    rf"|(?:{_WEEKDAY},?\s+)?\d{{1,2}}\s+{_MONTH}\s+\d{{4}}\s+{_CLOCK}(?:\s+{_ZONE})?"
    # Apache access logs: "30/Nov/2026:01:30:09 +0000"
    rf"|\d{{1,2}}/{_MONTH}/\d{{4}}:\d{{2}}:\d{{2}}:\d{{2}}(?:\s+[+-]\d{{4}})?"
    r")" + _NOT_BEFORE
)
_ISO_RE = re.compile(
    r"(?<![\w.])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)"
    r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"[T ](?:[01]\d|2[0-3]):[0-5]\d(?::(?:[0-5]\d|60)(?:[.,]\d+)?)?"
    r"(?:\s?(?:Z|UTC|[+-]\d{2}(?::?\d{2})?))?" + _NOT_BEFORE
)
# pytest's "(0:00:01.23)" and similar clock-style elapsed times.
_CLOCK_DUR_RE = re.compile(r"\(\d+:[0-5]\d:[0-5]\d(?:\.\d+)?\)")
_TIME_RE = re.compile(
    r"(?<![\w.:])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)"
    r"(?:[01]?\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d+|,\d{3}(?!\d))?(?:Z|[+-]\d{2}:\d{2})?"
    r"(?![\w:])(?!<[a-z]{3,4}>)"
)
_HEX = "[0-9a-fA-F]"
_UUID_RE = re.compile(
    _NOT_AFTER + rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}" + _NOT_BEFORE
)
_ADDR_RE = re.compile(_NOT_AFTER + r"0[xX][0-9a-fA-F]+" + _NOT_BEFORE)
_LONG_HEX_RE = re.compile(
    _NOT_AFTER + rf"(?={_HEX}*\d)(?={_HEX}*[a-fA-F]){_HEX}{{12,}}" + _NOT_BEFORE
)
_DUR_UNIT = r"(?:ms|us|µs|μs|ns|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?)"
_DUR_RE = re.compile(
    r"(?<![\w.])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)"
    r"(?:\d+h ?)?(?:\d+m ?)?\d+(?:\.\d+)? ?" + _DUR_UNIT + _NOT_BEFORE
)
# Request, trace and correlation ids in headers and logs: "x-github-request-id: C1A4:2B7E1".
_REQUEST_ID_RE = re.compile(
    r"(?i)(?<![\w-])((?:x-)?[\w-]*?(?:request|trace|span|correlation|amzn?-?)[-_]?id)"
    r"(\s*[:=]\s*\"?)(?!<id>)[^\s\",;]+"
)
_PID_KEYWORD = r"(?i:(?<![\w-])(?:pp?id|pgid)(?:\s*[:=#]\s*|\s+))\d+"
_PID_PROCESS = r"(?<![\w-])(?i:process)\s+\d{2,}"
_PID_RE = re.compile(f"{_PID_KEYWORD}{_NOT_BEFORE}|{_PID_PROCESS}{_NOT_BEFORE}")
_PID_DIGITS_RE = re.compile(r"\d+$")
# syslog style "python[1234]:" after a program name.
_PROG_PID_RE = re.compile(r"(?<=[\w.-])\[\d+\](?=:)")
_PORT_RE = re.compile(
    r"(?:"
    r"(?<![\w.])(?<!<[a-z]{3}>)(?<!<[a-z]{4}>)(?:\d{1,3}\.){3}\d{1,3}"
    r"|(?<![\w.-])(?i:localhost)"
    r"|\[[0-9A-Fa-f:.]+\]"
    r"|(?<=://)[\w.-]+"
    r"):(\d{4,5})" + _NOT_BEFORE
)


def _sub_pid(match: re.Match[str]) -> str:
    return _PID_DIGITS_RE.sub("<pid>", match.group(0))


def _sub_port(match: re.Match[str]) -> str:
    port = int(match.group(1))
    if 1024 <= port <= 65535:
        start, end = match.span(1)
        text = match.group(0)
        base = match.start(0)
        return text[: start - base] + "<port>" + text[end - base :]
    return match.group(0)


def strip_volatile(text: str) -> str:
    """
    Replace the volatile parts of a tool's output by placeholders.

    Volatile, with its placeholder:

    - ``<time>``: timestamps and times of day (ISO 8601, ``date``/``ctime``,
      syslog, RFC 2822, Apache logs); a date without a time is data, and kept;
    - ``<id>``: the values of request, trace, span and correlation ids
      (``x-github-request-id: C1A4:2B7E1``, ``trace_id=...``);
    - ``<uuid>``: UUIDs;
    - ``<hex>``: hex ids of 12 characters or more mixing digits and letters (git
      shas, container ids);
    - ``<addr>``: ``0x`` addresses;
    - ``<pid>``: process ids (``pid 1234``, ``pid=1234``, ``PID: 1234``,
      ``process 1234`` with two digits or more, ``python[1234]:``);
    - ``<dur>``: durations (``0.12s``, ``12ms``, ``1.5 seconds``, ``1m2.3s``,
      ``(0:00:01.23)``);
    - ``<tmp>``: temporary directories (``/tmp``, ``/var/tmp``, macOS
      ``/var/folders/..``, Windows ``AppData\\Local\\Temp``, ``tmpab12_cd``,
      ``pytest-of-user/pytest-12``);
    - ``<port>``: ephemeral ports (1024 and above after an IP address,
      ``localhost`` or a URL host).

    Kept: line and column numbers, counts, exit codes, versions, memory sizes and
    plain integers. The function is idempotent.

    Args:
        text: a tool's output.
    """
    text = _TMP_ROOT_RE.sub("<tmp>", text)
    text = _TMP_PART_RE.sub("<tmp>", text)
    text = _TMP_RUN_RE.sub("<tmp>", text)
    text = _LOG_DATE_RE.sub("<time>", text)
    text = _ISO_RE.sub("<time>", text)
    text = _CLOCK_DUR_RE.sub("(<dur>)", text)
    text = _TIME_RE.sub("<time>", text)
    text = _REQUEST_ID_RE.sub(r"\1\2<id>", text)
    text = _UUID_RE.sub("<uuid>", text)
    text = _ADDR_RE.sub("<addr>", text)
    text = _LONG_HEX_RE.sub("<hex>", text)
    text = _DUR_RE.sub("<dur>", text)
    text = _PID_RE.sub(_sub_pid, text)
    text = _PROG_PID_RE.sub("[<pid>]", text)
    return _PORT_RE.sub(_sub_port, text)


def normalize_output(text: str) -> str:
    """
    Normalize a tool's output for comparison: strip volatile parts, collapse whitespace.

    Args:
        text: a tool's output.
    """
    return collapse_whitespace(strip_volatile(text))


# Outputs at least this long are fingerprinted through a small cache, which
# :func:`prepare` fills off the event loop before the decision core asks.
_LARGE = 8_192


def fingerprint(text: str) -> str:
    """
    Fingerprint a tool's output, ignoring volatile parts and whitespace layout.

    Args:
        text: a tool's output.
    """
    if len(text) >= _LARGE:
        return _large_fingerprint(text)
    return digest(normalize_output(text))


@functools.lru_cache(maxsize=8)
def _large_fingerprint(text: str) -> str:
    return digest(normalize_output(text))


def prepare(output: str, exit_code: int | None) -> None:
    """
    Compute a large output's fingerprint and failure signature ahead, into a
    small cache (in a worker thread: normalizing a large output is CPU work that
    should not hold the event loop, and the wall-clock budget with it).

    Args:
        output: a tool's output.
        exit_code: its exit code.
    """
    if len(output) >= _LARGE:
        _large_fingerprint(output)
        _large_signature(output, exit_code)


# ---------------------------------------------------------------------------
# Failure signatures

_ERROR_LINE_RE = re.compile(
    # An exception type, possibly qualified: "ValueError: bad", "x.py:3: KeyError".
    r"(?:^|[^\w.])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b"
    # pytest's explanation lines: "E       assert 1 == 2".
    r"|^E\s+\S"
    r"|\b(?:FAILED|FAIL|ERROR|FATAL|PANIC)\b"
    r"|(?i:\b(?:error|fatal)(?:\[[\w-]+\])?:)"
    r"|(?i:\bpanic(?:ked)?\b)"
    r"|(?i:no such file|not found|permission denied|segmentation fault|core dumped)"
    r"|npm ERR!"
)
_TRACEBACK_START = "Traceback (most recent call last):"
_TRACEBACK_GLUE = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
_BOUND = 2_000
_SIGNATURE_VERSION = 1


def _error_lines(output: str) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    in_traceback = False
    for line in output.splitlines():
        is_error = False
        if line.startswith(_TRACEBACK_START):
            in_traceback = True
        elif (
            in_traceback
            and line.strip()
            and not line[0].isspace()
            and not line.startswith(_TRACEBACK_GLUE)
        ):
            # The first unindented line after a traceback names the exception,
            # whatever its type is called.
            is_error = True
            in_traceback = False
        if is_error or _ERROR_LINE_RE.search(line):
            norm = normalize_output(line)
            if norm and norm not in seen:
                seen.add(norm)
                found.append(norm)
    return found


def failure_signature(output: str, exit_code: int | None) -> str:
    """
    Summarize a failure so that one dead end gives one signature, however it was reached.

    The signature is built from the exit code, the output's error lines
    (exception lines, ``E`` lines of pytest, lines with ``FAILED``, ``ERROR``,
    ``error:``, ``fatal:``, panics, the final line of a traceback, "No such
    file", "not found", "Permission denied"), each normalized with
    :func:`normalize_output` and deduplicated in order, and the output's last
    non-empty line. Without error lines, the whole normalized output stands in
    for them (its first and last 2,000 characters). Volatile parts and
    whitespace do not matter, and neither does the spelling of the command that
    produced the output; another failing test, another exception message or
    another exit code gives another signature.

    Args:
        output: the command's output (stdout and stderr as the tool reports them).
        exit_code: its exit code; None when it did not exit (killed, timed out).
    """
    if len(output) >= _LARGE:
        return _large_signature(output, exit_code)
    return _failure_signature(output, exit_code)


@functools.lru_cache(maxsize=8)
def _large_signature(output: str, exit_code: int | None) -> str:
    return _failure_signature(output, exit_code)


def _failure_signature(output: str, exit_code: int | None) -> str:
    """Compute a failure signature (see :func:`failure_signature`)."""
    errors = _error_lines(output)
    last = ""
    for line in reversed(output.splitlines()):
        if line.strip():
            last = normalize_output(line)
            break
    parts: dict[str, Any] = {"v": _SIGNATURE_VERSION, "exit": exit_code, "last": last}
    if errors:
        parts["errors"] = errors
    else:
        whole = normalize_output(output)
        if len(whole) > 2 * _BOUND:
            whole = whole[:_BOUND] + " ... " + whole[-_BOUND:]
        parts["output"] = whole
    return digest(canonical_json(parts))


# ---------------------------------------------------------------------------
# Commands, paths, responses

_PYTHON_RE = re.compile(r"python(?:\d+(?:\.\d+)*)?(?:\.exe)?", re.IGNORECASE)
_ASSIGNMENT_RE = re.compile(r"[A-Za-z_]\w*=")


# Leading "./" components, each with the slashes after it.
_DOT_SLASHES_RE = re.compile(r"(?:\./+)*")


def _strip_dot_slash(token: str) -> str:
    # "--rootdir=./src" names the same path as "--rootdir=src".
    prefix, sep, rest = token.partition("=")
    if sep and prefix.startswith("-") and rest.startswith("./"):
        return prefix + sep + _strip_dot_slash(rest)
    if not token.startswith("./") or len(token) <= 2:
        return token
    # One match, not a strip per component: "././././..." stays linear.
    end = _DOT_SLASHES_RE.match(token).end()  # type: ignore[union-attr]
    if end < len(token):
        return token[end:]
    # Only "./" components: a final bare "./" is kept, as "./" alone is.
    return "./" if token.endswith("./") else "."


# One piece of a POSIX command line, as shlex reads it in POSIX mode with
# whitespace_split (shlex.split): whitespace, a run of plain characters, a
# single-quoted string, a double-quoted string, or a backslash escape.
_SHELL_PIECE_RE = re.compile(
    r"""(?P<space>[ \t\r\n]+)"""
    r"""|(?P<plain>[^ \t\r\n'"\\]+)"""
    r"""|'(?P<single>[^']*)'"""
    r'|"(?P<double>[^"\\]*(?:\\[\s\S][^"\\]*)*)"'
    r"""|\\(?P<escaped>[\s\S])"""
)
# Inside double quotes only a quote or a backslash is escaped; the backslash
# before anything else is kept (as shlex has it).
_DOUBLE_ESCAPE_RE = re.compile(r'\\(["\\])')


def split_command(cmd: str) -> list[str]:
    """
    Split a command line as :func:`shlex.split` does, in time linear in its length.

    :mod:`shlex` builds each token one character at a time by string
    concatenation, which is quadratic in the length of a token; this gives the
    same tokens from a handful of regular-expression pieces.

    Args:
        cmd: a shell command line.

    Raises:
        ValueError: an unclosed quotation, or a backslash at the very end.
    """
    tokens: list[str] = []
    parts: list[str] = []
    in_token = False
    pos, end = 0, len(cmd)
    while pos < end:
        match = _SHELL_PIECE_RE.match(cmd, pos)
        if match is None:
            if cmd[pos] == "\\":
                raise ValueError("No escaped character")
            raise ValueError("No closing quotation")
        pos = match.end()
        kind = match.lastgroup
        if kind == "space":
            if in_token:
                tokens.append("".join(parts))
                parts, in_token = [], False
            continue
        in_token = True
        text = match.group(kind or 0)
        if kind == "double" and "\\" in text:
            text = _DOUBLE_ESCAPE_RE.sub(r"\1", text)
        parts.append(text)
    if in_token:
        tokens.append("".join(parts))
    return tokens


def _is_python(token: str) -> bool:
    return _PYTHON_RE.fullmatch(posixpath.basename(token.replace("\\", "/"))) is not None


def normalize_command(cmd: str | Sequence[str]) -> str:
    """
    Normalize a command line so that different spellings of one command compare equal.

    The command is split like a POSIX shell would (on unbalanced quotes, on
    whitespace), so quoting and spacing do not matter; a leading ``./`` is
    dropped from path-like tokens; ``python3``, ``python3.11`` and paths to a
    Python interpreter become ``python``; ``python -m X ...`` becomes ``X ...``
    (``python -m pytest -q`` equals ``pytest -q``). Tokens are rejoined with
    single spaces and quoted only where they need it. Never raises.

    Args:
        cmd: a shell command line, or an argument vector.
    """
    try:
        if isinstance(cmd, str):
            try:
                tokens = split_command(cmd)
            except ValueError:
                tokens = cmd.split()
        else:
            tokens = [str(token) for token in cmd]
        tokens = [_strip_dot_slash(token) for token in tokens]
        # The program comes after any leading VAR=value assignments.
        head = 0
        while head < len(tokens) and _ASSIGNMENT_RE.match(tokens[head]):
            head += 1
        for i in range(head, len(tokens)):
            if _is_python(tokens[i]) and (i == head or "/" not in tokens[i]):
                tokens[i] = "python"
        if head < len(tokens) and tokens[head] == "python" and head + 1 < len(tokens):
            flag = tokens[head + 1]
            if flag == "-m" and head + 2 < len(tokens):
                tokens[head : head + 2] = []
            elif flag.startswith("-m") and len(flag) > 2:
                tokens[head : head + 2] = [flag[2:]]
        return " ".join(shlex.quote(token) for token in tokens)
    except Exception:  # pragma: no cover - a last resort; the contract is "never raises"
        return collapse_whitespace(str(cmd))


def normalize_path(path: str) -> str:
    """
    Normalize a path to one POSIX spelling.

    Backslashes become slashes; ``.`` components, doubled slashes and a trailing
    slash go away, ``..`` is folded lexically; ``""`` and ``"."`` give ``"."``.

    Args:
        path: a relative or absolute path, POSIX or Windows style.
    """
    norm = posixpath.normpath(path.replace("\\", "/"))
    if norm.startswith("//"):
        # normpath keeps a leading "//" (POSIX leaves its meaning open); fold it.
        norm = "/" + norm.lstrip("/")
    return norm


def response_fingerprint(text: str) -> str:
    """
    Fingerprint an agent's response, ignoring whitespace layout.

    All empty and whitespace-only responses share one fingerprint.

    Args:
        text: the response text.
    """
    return digest(collapse_whitespace(text))


_STATUS_WORDS = (
    r"Internal Server Error|Not Implemented|Bad Gateway|Service Unavailable|Gateway Time-?out"
    r"|HTTP Version Not Supported|Insufficient Storage|Loop Detected|Network Authentication"
)
# An HTTP status only counts where it is said to be one: "522 passed" is a test count,
# "assert 200 == 429" an assertion.
_INFRA = re.compile(
    r"\bHTTP(?:/\d(?:\.\d)?)?\s*(?:status\s*)?(?:429|5\d\d)\b"
    r"|\b(?:status|status[ _]code|response code|error code|returned error|code)\s*[:=]?\s*"
    r"(?:429|5\d\d)\b"
    rf"|\b(?:429\s+Too Many Requests|5\d\d\s+(?:{_STATUS_WORDS}))\b"
    rf"|\b(?:{_STATUS_WORDS})\b"
    r"|\btoo many requests\b|\brate[ -]?limit(?:ed|ing|s)?\b|\bRateLimit(?:Error|Exceeded)\b"
    r"|\bthrottl(?:ed|ing)\b|\bquota exceeded\b"
    r"|name or service not known|temporary failure in name resolution|could not resolve host"
    r"|nodename nor servname|\bgetaddrinfo\b|\bENOTFOUND\b|\bEAI_AGAIN\b|\bno such host\b"
    r"|\bNameResolutionError\b|failed to resolve|\bunknown host\b|dns (?:lookup|resolution)"
    r"|network is unreachable|no route to host|host is unreachable|\bENETUNREACH\b"
    r"|\bEHOSTUNREACH\b",
    re.IGNORECASE,
)


def is_infrastructure_error(result: ToolResult) -> bool:
    """
    Tell an infrastructure error from the agent's own failure.

    A result that is not ``ok`` and reports a rate limit (HTTP 429, "rate limit",
    "too many requests"), an HTTP 5xx status, or an unreachable host (DNS failure,
    "network is unreachable", "no route to host"). "Connection refused" is the
    agent's own failure: something it chose to call is not there.
    """
    return result.status is not ToolStatus.OK and bool(_INFRA.search(result.output))


def normalized_args(spec: ToolSpec, args: Mapping[str, Any]) -> dict[str, Any]:
    """A call's identifying arguments (its tool's ``identity``), paths and commands normalized."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if spec.identity is not None and key not in spec.identity:
            continue
        if key in spec.paths and isinstance(value, str):
            value = normalize_path(value)
        elif spec.name == "run_command" and key == "cmd" and isinstance(value, str | list):
            value = normalize_command(value)
        out[key] = value
    return out


def normalized_action(call: ToolCall, tools: Mapping[str, ToolSpec] | None = None) -> str:
    """Return the canonical JSON of a call: its tool and identifying, normalized arguments."""
    spec = spec_for(call.tool, dict(tools) if tools else None)
    return canonical_json({"tool": call.tool, "args": normalized_args(spec, call.args)})


def action_key(call: ToolCall, tools: Mapping[str, ToolSpec] | None = None) -> str:
    """Return the identity of a call for repetition checks (its normalized action)."""
    return normalized_action(call, tools)


@attrs.define(eq=False)
class Declarations:
    """
    A task's tool declarations, each looked up once, and the normalized action of the
    call at hand: what a judge derives from its task and the current call, not state.
    Asked with another ``tools`` mapping (the task amended), it starts afresh.
    """

    _tools: Mapping[str, ToolSpec] | None = None
    _specs: dict[str, ToolSpec] = attrs.field(factory=dict)
    # Per tool, whether its declaration normalizes a call as the built-in one does.
    _as_recorded: dict[str, bool] = attrs.field(factory=dict)
    # The call at hand and its normalized action: a step asks for it up to four times
    # (admission, the outcome, the round, the record).
    _call: ToolCall | None = None
    _action: str = ""

    def spec(self, tools: Mapping[str, ToolSpec], tool: str) -> ToolSpec:
        """The declaration of ``tool``: ``tools``' own, else the built-in one."""
        if tools is not self._tools:
            self._tools, self._specs, self._as_recorded, self._call = tools, {}, {}, None
        spec = self._specs.get(tool)
        if spec is None:
            spec = self._specs[tool] = spec_for(tool, dict(tools) if tools else None)
        return spec

    def action(self, tools: Mapping[str, ToolSpec], call: ToolCall) -> str:
        """:func:`normalized_action` of ``call`` by ``tools``, computed once per call."""
        spec = self.spec(tools, call.tool)
        if call is not self._call:
            args = normalized_args(spec, call.args)
            self._call, self._action = call, canonical_json({"tool": call.tool, "args": args})
        return self._action

    def recorded_action(self, tools: Mapping[str, ToolSpec], call: ToolCall) -> str:
        """
        :func:`normalized_action` of ``call`` by the built-in declarations, the one by
        ``tools`` reused where the tool's declaration normalizes as the built-in does.
        """
        spec = self.spec(tools, call.tool)
        same = self._as_recorded.get(call.tool)
        if same is None:
            # normalized_args reads a declaration's name, identity and paths only.
            builtin = spec_for(call.tool)
            same = (spec.identity, spec.paths) == (builtin.identity, builtin.paths)
            self._as_recorded[call.tool] = same
        return self.action(tools, call) if same else normalized_action(call)

    def forget_call(self) -> None:
        """Forget the call at hand (a new step begins)."""
        self._call = None
