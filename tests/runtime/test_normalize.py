from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import random
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import textwrap
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._digest import canonical_json, compact_json, digest
from proctor.runtime._progress import normalize as _normalize
from proctor.runtime._progress.judge import Judge, TaskFacts, action_key, normalized_action
from proctor.runtime._progress.normalize import (
    collapse_whitespace,
    failure_signature,
    fingerprint,
    normalize_command,
    normalize_output,
    normalize_path,
    response_fingerprint,
    strip_volatile,
)
from proctor.runtime._progress.policy import Policy
from proctor.runtime._records import ToolCall
from proctor.runtime._tools.spec import ToolSpec


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_normalize.__all__, tuple)
    for name in _normalize.__all__:
        assert getattr(_normalize, name).__doc__, name


# --- canonical_json ---------------------------------------------------------


def test_canonical_json_sorts_keys_and_is_compact() -> None:
    assert canonical_json({"b": 1, "a": [1, 2], "c": {"z": None, "y": True}}) == (
        '{"a":[1,2],"b":1,"c":{"y":true,"z":null}}'
    )


def test_canonical_json_keeps_non_ascii() -> None:
    assert canonical_json({"k": "café ∑"}) == '{"k":"café ∑"}'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (0.0, "0"),
        (-3.0, "-3"),
        (1e20, "100000000000000000000"),
        (1.5, "1.5"),
        (-0.25, "-0.25"),
        (7, "7"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
    ],
)
def test_canonical_json_numbers_have_one_form(value: Any, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1, {"x": math.nan}]])
def test_canonical_json_rejects_non_finite_floats(value: Any) -> None:
    with pytest.raises(ValueError, match="finite"):
        canonical_json(value)


@pytest.mark.parametrize("key", [1, None, 1.5, ("a",)])
def test_canonical_json_rejects_non_string_keys(key: Any) -> None:
    with pytest.raises(ValueError, match="string keys"):
        canonical_json({key: 1})


def test_canonical_json_rejects_keys_that_collide_after_nfc() -> None:
    with pytest.raises(ValueError, match="NFC"):
        canonical_json({"e\u0301": 1, "\u00e9": 2})


def test_canonical_json_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="set"):
        canonical_json({"a": {1, 2}})


def test_canonical_json_normalizes_strings_to_nfc() -> None:
    decomposed = {"cafe\u0301": ["cafe\u0301"]}
    composed = {"caf\u00e9": ["caf\u00e9"]}
    assert canonical_json(decomposed) == canonical_json(composed) == '{"café":["café"]}'


def test_canonical_json_writes_tuples_as_lists() -> None:
    assert canonical_json({"t": (1, ("a", 2.0))}) == canonical_json({"t": [1, ["a", 2]]})


# NaN, infinities and lone surrogates too: what json.dumps is given from anywhere.
_any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None)),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(value=_any_json, ascii=st.booleans(), sort_keys=st.booleans())
def test_compact_json_is_json_dumps_with_its_options(
    value: Any, ascii: bool, sort_keys: bool
) -> None:
    # The encoders made once write what json.dumps writes, lone surrogates,
    # NaN and key order included.
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii, sort_keys=sort_keys)
    assert compact_json(value, ascii=ascii, sort_keys=sort_keys) == expected


@given(value=_any_json)
def test_canonical_json_is_the_canonical_form_through_json_dumps(value: Any) -> None:
    try:
        text = canonical_json(value)
    except ValueError:
        return  # a NaN or an infinity, or keys that collide after NFC
    plain = _normalize_for_canonical(value)
    assert text == json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalize_for_canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [_normalize_for_canonical(v) for v in value]
    if isinstance(value, dict):
        nfc = unicodedata.normalize
        return {nfc("NFC", k): _normalize_for_canonical(v) for k, v in value.items()}
    return value


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _reorder(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {key: _reorder(value[key], rng) for key in keys}
    if isinstance(value, list):
        return [_reorder(item, rng) for item in value]
    return value


@given(_json_values, st.randoms(use_true_random=False))
def test_canonical_json_ignores_key_order(value: Any, rng: random.Random) -> None:
    try:
        expected = canonical_json(value)
    except ValueError:  # keys colliding after NFC are rejected whatever the order
        return
    assert canonical_json(_reorder(value, rng)) == expected


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_canonical_json_integral_floats_equal_ints(number: int) -> None:
    assert canonical_json(float(number)) == canonical_json(number) == str(number)
    assert canonical_json({"n": [float(number)]}) == canonical_json({"n": [number]})


# --- digest, collapse_whitespace --------------------------------------------


def test_digest_is_blake2b_128() -> None:
    expected = hashlib.blake2b(b"hello", digest_size=16).hexdigest()
    assert digest("hello") == digest(b"hello") == expected
    assert len(expected) == 32
    assert digest("é") == hashlib.blake2b("é".encode(), digest_size=16).hexdigest()
    assert digest("a") != digest("b")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  a  b\n\n c\t", "a b c"),
        ("a\r\nb", "a b"),
        ("", ""),
        (" \n\t ", ""),
        ("one", "one"),
    ],
)
def test_collapse_whitespace(text: str, expected: str) -> None:
    assert collapse_whitespace(text) == expected


# --- strip_volatile ---------------------------------------------------------

_STRIPPED = [
    # timestamps, dates, times
    ("at 2026-11-30T01:02:03.123Z ok", "at <time> ok"),
    ("at 2026-11-30T01:02:03+01:00 ok", "at <time> ok"),
    ("2026-11-30 01:02:03 started", "<time> started"),
    ("2026-11-30 01:02:03,123 INFO ready", "<time> INFO ready"),
    ("x-github-request-id: C1A4:2B7E1:3F2A:1B", "x-github-request-id: <id>"),
    ("took place at 01:02:03.456 exactly", "took place at <time> exactly"),
    ("now 23:59:59", "now <time>"),
    ("Mon Nov 30 01:30:09 UTC 2026", "<time>"),
    ("Nov 30 01:30:09 build-host kernel: x", "<time> build-host kernel: x"),
    ("Date: Mon, 30 Nov 2026 01:30:09 GMT", "Date: <time>"),
    ('127.0.0.1 - - [30/Nov/2026:01:30:09 +0000] "GET /"', '127.0.0.1 - - [<time>] "GET /"'),
    ('trace_id="0af7651916cd43dd"', 'trace_id="<id>"'),
    # ids and addresses
    ("run 123e4567-e89b-12d3-a456-426614174000 done", "run <uuid> done"),
    ("RUN 123E4567-E89B-12D3-A456-426614174000", "RUN <uuid>"),
    ("HEAD is now at 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b", "HEAD is now at <hex>"),
    ("container abcdef123456 started", "container <hex> started"),
    ("image sha256:0123456789abcdef0123 pulled", "image sha256:<hex> pulled"),
    ("<object at 0x7ffd5e8c>", "<object at <addr>>"),
    ("segfault at 0x0 ip 0x00007f3a", "segfault at <addr> ip <addr>"),
    # pids
    ("started pid 1234", "started pid <pid>"),
    ("worker pid=1234 up", "worker pid=<pid> up"),
    ("PID: 1234", "PID: <pid>"),
    ("(pid 7)", "(pid <pid>)"),
    ("killed process 1234 (python)", "killed process <pid> (python)"),
    ("python[1234]: ready", "python[<pid>]: ready"),
    ("Nov 30 01:30:09 host sshd[987]: accepted", "<time> host sshd[<pid>]: accepted"),
    # durations
    ("3 failed, 2 passed in 0.12s", "3 failed, 2 passed in <dur>"),
    ("step 12ms", "step <dur>"),
    ("waited 1.5 seconds", "waited <dur>"),
    ("done in 3.40s.", "done in <dur>."),
    ("took 5 s", "took <dur>"),
    ("1 passed in 1.23s (0:00:01.23)", "1 passed in <dur> (<dur>)"),
    ("elapsed 1m2.3s", "elapsed <dur>"),
    ("real\t0m1.234s", "real\t<dur>"),
    ("Ran 12 tests in 0.003s", "Ran 12 tests in <dur>"),
    ("timeout after 30 sec", "timeout after <dur>"),
    ("latency 250us", "latency <dur>"),
    # temporary paths
    ('File "/tmp/tmpab12_cd/x.py", line 12', 'File "<tmp>/x.py", line 12'),
    ("wrote /tmp/out.txt", "wrote <tmp>/out.txt"),
    ("cache in /var/tmp/build/a", "cache in <tmp>/build/a"),
    ("/private/var/folders/ab/cd12ef_gh/T/tmpxyz12345/f.txt", "<tmp>/f.txt"),
    ("/var/folders/xy/zz99kk/T/a.log", "<tmp>/a.log"),
    ("C:\\Users\\x\\AppData\\Local\\Temp\\tmp123abc\\x.py", "<tmp>\\x.py"),
    ("/tmp/pytest-of-root/pytest-12/test_a0/x.txt", "<tmp>/test_a0/x.txt"),
    ("basetemp /home/u/.t/pytest-of-u/pytest-3/b", "basetemp /home/u/.t/<tmp>/b"),
    ("see build/tmpab12_cd/log", "see build/<tmp>/log"),
    ("open tmpab12cd34.py", "open <tmp>.py"),
    ("echo hi >/tmp/x", "echo hi ><tmp>/x"),
    # ephemeral ports
    ("listening on 127.0.0.1:54321", "listening on 127.0.0.1:<port>"),
    ("listening on localhost:54321", "listening on localhost:<port>"),
    ("GET http://example.com:9000/x", "GET http://example.com:<port>/x"),
    ("bound [::1]:40000", "bound [::1]:<port>"),
]


@pytest.mark.parametrize(("text", "expected"), _STRIPPED)
def test_strip_volatile_replaces_volatile_parts(text: str, expected: str) -> None:
    assert strip_volatile(text) == expected
    assert strip_volatile(expected) == expected


_KEPT = [
    # A date without a time of day is data (a debugger's value, a release date).
    "built on 2026-11-30.",
    "released Nov 30, 2026",
    "['2024-02-29', 'ok']",
    'File "src/app.py", line 12, in main',
    "src/app.py:12: AssertionError",
    "src/app.py:12:5: error: Incompatible types",
    "3 failed, 2 passed, 1 skipped",
    "Found 3 errors in 2 files (checked 10 source files)",
    "exit code 1",
    "Process exited with exit status 2",
    "Python 3.11.7 on linux",
    "requires numpy>=1.26.4",
    "peak memory 12MB, rss 1.5 GiB, heap 512M, -Xmx512m",
    "42",
    "port 80 on 127.0.0.1:80",
    "process 3 files",
    "/home/user/tmp/notes.txt",
    "deadbeefcafe",
    "1234567890123",
    "test_retry_after_1s PASSED",
    "ratio 12:30",
    "[100%]",
]


@pytest.mark.parametrize("text", _KEPT)
def test_strip_volatile_keeps_meaningful_numbers(text: str) -> None:
    assert strip_volatile(text) == text


_FRAGMENTS = [
    "2026-11-30", "T", " ", "01:02:03", ".123", "Z", ":", "/", "\\", "tmp", "/tmp", "/var",
    "ab12_cd3", "pid", "=", "1234", "[", "]", "0x", "7ffd", "abcdef", "123456", "-", "e89b",
    "s", "ms", "m", ".", "(", ")", "0:00:01.23", "localhost", "127.0.0.1", "54321", "Nov",
    "30", "Mon", "UTC", "2026", "<tmp>", "<hex>", "<time>", "<dur>", "<pid>", "<port>",
    "<uuid>", "<addr>", "process", "python", "pytest-of-root", "pytest-12", "h", "x", ",",
    "://", "folders", "seconds", "\n", "C:", "Users", "AppData", "Local", "Temp", "0", "9",
]  # fmt: skip


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=16).map("".join))
def test_strip_volatile_is_idempotent_on_fragments(text: str) -> None:
    once = strip_volatile(text)
    assert strip_volatile(once) == once


@given(st.text(alphabet="0123456789abcdefxmspidtTZ:./\\-_ <>[]()=,\nNovMonUTClh", max_size=40))
def test_strip_volatile_is_idempotent_on_noise(text: str) -> None:
    once = strip_volatile(text)
    assert strip_volatile(once) == once


@given(st.text())
def test_strip_volatile_is_idempotent_on_any_text(text: str) -> None:
    once = strip_volatile(text)
    assert strip_volatile(once) == once


# --- fingerprints stable under volatile values -------------------------------

_prose = st.text(alphabet=string.ascii_lowercase + " .,;\n", max_size=30)
_moments = st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2100, 1, 1))
_time_formats = st.sampled_from(
    [
        dt.datetime.isoformat,
        lambda m: m.strftime("%Y-%m-%d %H:%M:%S"),
        lambda m: m.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        lambda m: m.strftime("%a %b %d %H:%M:%S UTC %Y"),
        lambda m: m.strftime("%H:%M:%S.%f"),
        lambda m: m.strftime("%d/%b/%Y:%H:%M:%S +0000"),
    ]
)
_pid_formats = st.sampled_from(
    ["pid {}", "pid={}", "PID: {}", "process {}", "python[{}]: x", "(pid {})"]
)
# Running systems hand out pids in the hundreds and above.
_pids = st.integers(min_value=100, max_value=4_194_304)
_seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)


def _clock_duration(seconds: float) -> str:
    cs = int(seconds * 100)
    return f"({cs // 360_000}:{cs // 6000 % 60:02d}:{cs // 100 % 60:02d}.{cs % 100:02d})"


_duration_formats = st.sampled_from(
    [
        "{:.2f}s".format,
        lambda s: f"{int(s * 1000)}ms",
        "{:.1f} seconds".format,
        "in {:.2f}s".format,
        lambda s: f"took {int(s)} s",
        _clock_duration,
        lambda s: f"{int(s) // 60}m{s % 60:.1f}s",
    ]
)


@given(_prose, _prose, _time_formats, _moments, _moments)
def test_fingerprint_ignores_the_timestamp(
    before: str, after: str, fmt: Any, one: dt.datetime, other: dt.datetime
) -> None:
    assert fingerprint(f"{before} {fmt(one)} {after}") == fingerprint(
        f"{before} {fmt(other)} {after}"
    )


@given(_prose, _prose, st.uuids(), st.uuids())
def test_fingerprint_ignores_the_uuid(before: str, after: str, one: Any, other: Any) -> None:
    assert fingerprint(f"{before} {one} {after}") == fingerprint(f"{before} {other} {after}")


@given(_prose, _prose, _pid_formats, _pids, _pids)
def test_fingerprint_ignores_the_pid(
    before: str, after: str, fmt: str, one: int, other: int
) -> None:
    assert fingerprint(f"{before} {fmt.format(one)} {after}") == fingerprint(
        f"{before} {fmt.format(other)} {after}"
    )


@given(_prose, _prose, _duration_formats, _seconds, _seconds)
def test_fingerprint_ignores_the_duration(
    before: str, after: str, fmt: Any, one: float, other: float
) -> None:
    assert fingerprint(f"{before} {fmt(one)} {after}") == fingerprint(
        f"{before} {fmt(other)} {after}"
    )


def test_fingerprint_tells_different_outputs_apart() -> None:
    assert fingerprint("3 failed") != fingerprint("2 failed")
    assert fingerprint("line 12") != fingerprint("line 13")
    assert fingerprint("a\n  b") == fingerprint("a b") == digest("a b")


def test_normalize_output_strips_then_collapses() -> None:
    text = "ok  at 2026-11-30T01:02:03Z\n\n  in 0.5s  "
    assert normalize_output(text) == "ok at <time> in <dur>"


# --- failure_signature ------------------------------------------------------

_PYTEST_FAIL = """\
{echo}
F.                                                                       [100%]
=================================== FAILURES ===================================
________________________________ {test} ________________________________

tmp_path = PosixPath('/tmp/pytest-of-root/pytest-{n}/{test}0')

    def {test}(tmp_path):
>       assert compute() == {value}
E       assert 1 == {value}
E        +  where 1 = compute()

test_calc.py:7: AssertionError
=========================== short test summary info ============================
FAILED test_calc.py::{test} - assert 1 == {value}
1 failed, 1 passed in {secs}s
"""


def _pytest_output(
    echo: str = "$ pytest -q",
    test: str = "test_add",
    value: int = 2,
    n: int = 12,
    secs: str = "0.12",
) -> str:
    return _PYTEST_FAIL.format(echo=echo, test=test, value=value, n=n, secs=secs)


def test_failure_signature_ignores_command_spelling_timings_and_tmp_paths() -> None:
    one = _pytest_output(echo="$ pytest -q", n=12, secs="0.12")
    other = _pytest_output(echo="$ python -m pytest -q", n=13, secs="1.87")
    assert one != other
    assert failure_signature(one, 1) == failure_signature(other, 1)


def test_failure_signature_tells_failures_apart() -> None:
    base = failure_signature(_pytest_output(), 1)
    assert failure_signature(_pytest_output(test="test_sub"), 1) != base
    assert failure_signature(_pytest_output(value=3), 1) != base
    assert failure_signature(_pytest_output(), 2) != base
    assert failure_signature(_pytest_output(), None) != base


def test_failure_signature_uses_the_final_traceback_line() -> None:
    def traceback(message: str, pid: int, where: str) -> str:
        return textwrap.dedent(
            f"""\
            worker pid={pid} starting at 2026-11-30 01:0{pid % 10}:00
            Traceback (most recent call last):
              File "{where}/job.py", line 3, in <module>
                run()
              File "{where}/job.py", line 2, in run
                raise Stalled("{message}")
            job.Stalled: {message}
            worker exited
            """
        )

    one = traceback("queue empty", 1234, "/tmp/tmpab12cd34")
    other = traceback("queue empty", 5678, "/tmp/tmpzz_99xyz")
    assert failure_signature(one, 1) == failure_signature(other, 1)
    changed = traceback("queue full", 1234, "/tmp/tmpab12cd34")
    assert failure_signature(changed, 1) != failure_signature(one, 1)


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: bad",
        "E   assert 1 == 2",
        "FAILED tests/test_a.py::test_x - boom",
        "ERROR collecting tests/test_a.py",
        "src/a.c:3:1: error: expected ';'",
        "error[E0308]: mismatched types",
        "fatal: not a git repository",
        "panic: runtime error: index out of range",
        "cat: x.txt: No such file or directory",
        "bash: foo: command not found",
        "open /etc/shadow: Permission denied",
        "ModuleNotFoundError: No module named 'x'",
        "--- FAIL: TestThing (0.00s)",
    ],
)
def test_failure_signature_reads_error_lines(line: str) -> None:
    # An error line decides the signature even when the lines around it change.
    one = f"noise one\n{line}\nsame last line\n"
    other = f"noise two\nmore noise\n{line}\nsame last line\n"
    assert failure_signature(one, 1) == failure_signature(other, 1)
    assert failure_signature(one, 1) != failure_signature(
        f"noise one\n{line} and more\nsame last line\n", 1
    )


def test_failure_signature_deduplicates_error_lines() -> None:
    once = "x\nerror: disk full\ndone\n"
    twice = "x\nerror: disk full\ny\nerror: disk full\ndone\n"
    assert failure_signature(once, 1) == failure_signature(twice, 1)


def test_failure_signature_uses_the_last_line() -> None:
    assert failure_signature("error: x\nstep a\n", 1) != failure_signature("error: x\nstep b\n", 1)


def test_failure_signature_without_error_lines_uses_the_output() -> None:
    assert failure_signature("alpha\nbeta\n", 3) == failure_signature("alpha  \n\n beta ", 3)
    assert failure_signature("alpha\nbeta\n", 3) != failure_signature("alpha\ngamma\n", 3)
    assert failure_signature("", None) == failure_signature("  \n", None)


def test_failure_signature_bounds_a_long_output() -> None:
    head, tail = "h" * 3_000, "t" * 3_000
    one = f"{head}\nmiddle one\n{tail}"
    other = f"{head}\nmiddle two\n{tail}"
    assert failure_signature(one, 1) == failure_signature(other, 1)
    assert failure_signature("x" + one, 1) != failure_signature(one, 1)


_FAILING_TESTS = """\
def test_ok():
    pass


def test_reads(tmp_path):
    (tmp_path / "missing.txt").read_text()
"""


def _pytest_command(module: bool) -> list[str]:
    if module:
        return [sys.executable, "-m", "pytest"]
    script = Path(sys.executable).with_name("pytest")
    found = str(script) if script.exists() else shutil.which("pytest")
    assert found is not None
    return [found]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Third-party plugins only slow the runs down and may print their own lines.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_failure_signature_of_real_pytest_runs(tmp_path: Path) -> None:
    (tmp_path / "test_files.py").write_text(_FAILING_TESTS)
    flags = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_files.py"]
    via_script = _run([*_pytest_command(module=False), *flags], tmp_path)
    via_module = _run([*_pytest_command(module=True), *flags], tmp_path)
    assert via_script.returncode == via_module.returncode == 1
    # Each run gets its own numbered base temp directory.
    assert via_script.stdout != via_module.stdout
    assert failure_signature(via_script.stdout, 1) == failure_signature(via_module.stdout, 1)

    (tmp_path / "test_files.py").write_text(_FAILING_TESTS.replace("pass", "assert 1 == 2"))
    other = _run([*_pytest_command(module=True), *flags], tmp_path)
    assert other.returncode == 1
    assert failure_signature(other.stdout, 1) != failure_signature(via_module.stdout, 1)


_CRASHING_SCRIPT = """\
import datetime, os, sys
print("worker", "pid", os.getpid(), "at", datetime.datetime.now().isoformat())
raise RuntimeError(sys.argv[1] + " in " + os.path.dirname(os.path.abspath(__file__)))
"""


def test_failure_signature_of_real_crashes() -> None:
    def crash(message: str) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory() as where:
            script = Path(where) / "job.py"
            script.write_text(_CRASHING_SCRIPT)
            return _run([sys.executable, str(script), message], Path(where))

    one, other, changed = crash("no input"), crash("no input"), crash("bad input")
    assert one.returncode == other.returncode == changed.returncode == 1
    assert one.stdout + one.stderr != other.stdout + other.stderr
    signature = failure_signature(one.stdout + one.stderr, one.returncode)
    assert failure_signature(other.stdout + other.stderr, other.returncode) == signature
    assert failure_signature(changed.stdout + changed.stderr, changed.returncode) != signature


# --- normalize_command ------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("pytest -q", "pytest   -q"),
        ("pytest -q", "  pytest\t-q  "),
        ("pytest -q", "'pytest' \"-q\""),
        ("pytest -q", ["pytest", "-q"]),
        ("pytest -q", ("pytest", "-q")),
        ("python -m pytest -q", "pytest -q"),
        ("python3 -m pytest -q", "pytest -q"),
        ("python3.11 -m pytest -q", "pytest -q"),
        ("/usr/bin/python3 -m pytest -q", "pytest -q"),
        ("python -mpytest -q", "pytest -q"),
        ("python3 x.py", "python x.py"),
        ("python ./x.py", "python x.py"),
        ("./run.sh --rootdir=./src", "run.sh --rootdir=src"),
        ("cat ././a.txt", "cat a.txt"),
        ("echo 'a b'", 'echo "a b"'),
        ("FOO=1 python3 -m pip list", "FOO=1 pip list"),
    ],
)
def test_normalize_command_equal_spellings(
    one: str | Sequence[str], other: str | Sequence[str]
) -> None:
    assert normalize_command(one) == normalize_command(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("pytest -q", "pytest -x"),
        ("echo 'a b'", "echo a b"),
        ("python -m pytest", "python pytest"),
        ("pytest tests/a.py", "pytest tests/b.py"),
        ("python -u -m pytest", "pytest"),
    ],
)
def test_normalize_command_different_commands(one: str, other: str) -> None:
    assert normalize_command(one) != normalize_command(other)


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        ("python3 -m pytest  -q", "pytest -q"),
        ("echo 'a b'", "echo 'a b'"),
        ("", ""),
        ("   ", ""),
        ("./", "./"),
        ("python", "python"),
        ("python -m", "python -m"),
    ],
)
def test_normalize_command_output(cmd: str, expected: str) -> None:
    assert normalize_command(cmd) == expected


@given(st.text() | st.lists(st.text()))
def test_normalize_command_never_raises(cmd: str | list[str]) -> None:
    assert isinstance(normalize_command(cmd), str)


def test_normalize_command_survives_unbalanced_quotes() -> None:
    assert normalize_command("echo 'oops") == normalize_command("echo   'oops")


# --- normalize_path, response_fingerprint ------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", "."),
        (".", "."),
        ("./", "."),
        ("./src/a.py", "src/a.py"),
        ("src//a.py", "src/a.py"),
        ("src/a/", "src/a"),
        ("src\\pkg\\a.py", "src/pkg/a.py"),
        ("src/./pkg/../a.py", "src/a.py"),
        ("/abs//path/", "/abs/path"),
        ("//net/share", "/net/share"),
        ("C:\\work\\x", "C:/work/x"),
    ],
)
def test_normalize_path(path: str, expected: str) -> None:
    assert normalize_path(path) == expected
    assert normalize_path(expected) == expected


def test_response_fingerprint_ignores_layout() -> None:
    assert response_fingerprint("Done.\n\n  All good") == response_fingerprint("Done. All good")
    assert response_fingerprint("a") != response_fingerprint("b")
    assert response_fingerprint("a 12:00:01") != response_fingerprint("a 12:00:02")


@given(st.text(alphabet=" \t\r\n\x0b\x0c\u00a0\u2003"))
def test_response_fingerprint_folds_blank_texts(text: str) -> None:
    assert response_fingerprint(text) == response_fingerprint("") == digest("")


# -- command splitting: shlex's tokens, in linear time -------------------------------------

_SHELL_ALPHABET = st.sampled_from(list(" \t\r\n'\"\\ab=./-$#é"))


@given(st.text(alphabet=_SHELL_ALPHABET, max_size=40))
def test_split_command_gives_shlex_tokens_or_its_error(cmd: str) -> None:
    from proctor.runtime._progress.normalize import split_command

    # The tokens, or that it raises (the command then falls back to a plain split).
    try:
        expected: list[str] | None = shlex.split(cmd)
    except ValueError:
        expected = None
    try:
        got: list[str] | None = split_command(cmd)
    except ValueError:
        got = None
    assert got == expected


def _old_strip(token: str) -> str:
    # The quadratic definition this replaces, kept as the specification.
    prefix, sep, rest = token.partition("=")
    if sep and prefix.startswith("-") and rest.startswith("./"):
        return prefix + sep + _old_strip(rest)
    while token.startswith("./") and len(token) > 2:
        token = token[2:].lstrip("/") or "."
    return token


@given(st.text(alphabet=st.sampled_from(list("./a=-")), max_size=24))
def test_leading_dot_slashes_are_stripped_as_before(token: str) -> None:
    from proctor.runtime._progress.normalize import _strip_dot_slash

    assert _strip_dot_slash(token) == _old_strip(token)


def test_a_long_command_normalizes_like_a_short_one() -> None:
    # Linear, not quadratic: 400 KB of one token and of "./" components (the
    # times are measured in benchmarks; here, that it finishes and is right).
    assert normalize_command("echo " + "x" * 400_000) == "echo " + "x" * 400_000
    assert normalize_command("cat " + "./" * 200_000 + "a") == "cat a"
    assert normalize_command('echo "' + 'a\\"' * 100_000 + '"') == "echo " + shlex.quote(
        'a"' * 100_000
    )


_NAMES = st.sampled_from(["run_command", "read_file", "write_file", "mine", "cmd", "path"])
_ARG = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(
    tool=_NAMES,
    args=st.dictionaries(st.sampled_from(["cmd", "path", "x", "y"]), _ARG, max_size=4),
    declared=st.none()
    | st.builds(
        lambda paths, identity: (paths, identity),
        st.lists(st.sampled_from(["path", "x"]), max_size=2, unique=True).map(tuple),
        st.none() | st.lists(st.sampled_from(["cmd", "x", "y"]), max_size=2).map(tuple),
    ),
    again=st.booleans(),
)
def test_the_judge_s_recorded_action_is_the_built_in_normalized_action(
    tool: str, args: dict[str, Any], declared: tuple[Any, Any] | None, again: bool
) -> None:
    # A task's own declaration normalizes the judge's key; a trace record holds the
    # action as the built-in declarations have it, whatever the task declared, and
    # asking for the judge's key first (its cache) changes neither.
    tools = (
        {} if declared is None else {tool: ToolSpec(tool, paths=declared[0], identity=declared[1])}
    )
    judge = Judge(TaskFacts(tools=tools), Policy(), "d0")
    call = ToolCall(tool, args)
    if again:
        assert judge.action(call) == action_key(call, tools)
    assert judge.recorded_action(call) == normalized_action(call)
    assert judge.action(call) == action_key(call, tools)


def test_a_call_proposed_again_with_other_arguments_is_judged_by_them() -> None:
    # The judge keeps a call's action within a step; admission starts the next.
    judge = Judge(TaskFacts(), Policy(), "d0")
    call = ToolCall("run_command", {"cmd": "make  test"})
    assert judge.admit(call) is None
    assert judge.action(call) == action_key(call)
    call.args["cmd"] = "rm -rf build"
    assert judge.admit(call) is None
    assert judge.action(call) == action_key(call)
    assert judge.recorded_action(call) == normalized_action(call)
    assert "rm -rf build" in judge.recorded_action(call)
