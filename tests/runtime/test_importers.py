"""
Importers of other agents' transcripts, on real files (tests/real/raw), on malformed
and hostile input, and through ``proctor import``.

Every conversion is checked by proctor's own trajectory parser: what an importer
writes is a trajectory ``proctor replay`` reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor._errors import TranscriptError
from proctor.runtime._importers import FORMATS, detect_format, import_file, shell_may_change
from proctor.runtime._importers.base import MAX_OUTPUT, trim
from proctor.runtime._importers.evallog import import_inspect, inspect_samples
from proctor.runtime._importers.openhands import import_openhands, openhands_runs
from proctor.runtime._importers.sessions import import_claude, import_codex, import_gemini
from proctor.runtime._importers.swe import import_mini, import_sweagent
from proctor.runtime._progress.trajectory import parse_trajectory, replay

RAW = Path(__file__).resolve().parents[1] / "real" / "raw"

REAL: dict[str, list[str]] = {
    "mini": [
        "mini/django__django-16255.traj.json",
        "mini/django__django-15127.traj.json",
        "mini/upstream_local.traj.json",
        "mini/upstream_github_issue.traj.json",
    ],
    "sweagent": [
        "sweagent/pydicom-1458.traj",
        "sweagent/test-repo-i1.traj",
        "sweagent/humanevalfix-python-0.traj",
    ],
    "openhands": [
        "openhands/wrong_initial_state.json",
        "openhands/basic_interactions.json",
        "openhands/resolver_output.jsonl",
        "openhands/sdk_goal_events.jsonl",
    ],
    "claude": ["claude/short.jsonl", "claude/subagent.jsonl", "claude/agent-aac57f5.jsonl"],
    "codex": [
        "codex/rollout-2026-01-02T18-39-45-019b7f94.jsonl",
        "codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl",
    ],
    "gemini": [
        "gemini/session-2025-12-01T21-45-5b959dae.json",
        "gemini/session-2026-01-16T11-01-file-ops-37b7abef.json",
    ],
    "inspect": [
        "inspect/log_message_deduplication.eval",
        "inspect/log_read_sample.eval",
        "inspect/2025-05-12T20-28-13-04-00_popularity.json",
    ],
}
CASES = [(fmt, rel) for fmt, files in REAL.items() for rel in files]


def raw(rel: str) -> Path:
    return RAW / rel


def lines_of(header: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(header), *(json.dumps(e) for e in events)]


def runs_of(path: Path, fmt: str) -> list[int | None]:
    if fmt == "openhands":
        return list(range(len(openhands_runs(path))))
    if fmt == "inspect":
        return list(range(len(inspect_samples(path))))
    return [None]


def convert(path: Path, fmt: str, index: int | None = None) -> list[dict[str, Any]]:
    header, events = import_file(path, fmt, **({} if index is None else {"index": index}))
    parse_trajectory(lines_of(header, events))
    return events


def check_rounds(events: list[dict[str, Any]]) -> None:
    seen: set[Any] = set()
    previous = None
    for e in events:
        r = e.get("round")
        if r is not None and r != previous:
            assert r not in seen, f"round {r} is not one run of consecutive actions"
            seen.add(r)
        previous = r
    sizes: dict[Any, int] = {}
    for e in events:
        if "round" in e:
            sizes[e["round"]] = sizes.get(e["round"], 0) + 1
    assert all(n > 1 for n in sizes.values()), "a round of one action"


# -- real files -------------------------------------------------------------------------


def test_every_format_has_at_least_two_real_files() -> None:
    assert set(REAL) == set(FORMATS)
    for fmt, files in REAL.items():
        assert len([f for f in files if raw(f).is_file()]) >= 2, fmt


@pytest.mark.parametrize(("fmt", "rel"), CASES, ids=[r for _, r in CASES])
def test_a_real_file_is_detected_converted_and_replayed(fmt: str, rel: str) -> None:
    path = raw(rel)
    assert detect_format(path) == fmt
    for index in runs_of(path, fmt):
        header, events = import_file(path, fmt, **({} if index is None else {"index": index}))
        assert events
        trajectory = parse_trajectory(lines_of(header, events))
        result = replay(trajectory)
        assert result.events == len(events)
        check_rounds(events)
        if header["task"].get("checks"):
            verdicts = {e["check"] for e in events if e["type"] == "verdict"}
            assert set(header["task"]["checks"]) == verdicts
        for e in events:
            if e["type"] == "action" and e["tool"] == "run_command":
                assert set(e["args"]) == {"cmd"}
                assert e.get("changed", False) is shell_may_change(e["args"]["cmd"])


def test_mini_resolved_run_has_its_harness_verdict_and_shell_edits() -> None:
    events = convert(raw("mini/django__django-16255.traj.json"), "mini")
    verdicts = [e for e in events if e["type"] == "verdict"]
    assert verdicts == [
        {"type": "verdict", "check": "swebench", "passed": True, "output": "resolved"}
    ]
    assert events[-2]["type"] == "message"
    assert events[-2]["kind"] == "final_answer"
    actions = [e for e in events if e["type"] == "action"]
    assert all(e["tool"] == "run_command" and "exit_code" in e["result"] for e in actions)
    assert any(e.get("changed") for e in actions)
    readers = ("grep", "ls", "find", "nl ", "cat ")
    assert not any(
        e.get("changed")
        for e in actions
        if e["args"]["cmd"].startswith(readers) and ">" not in e["args"]["cmd"]
    )


def test_mini_unresolved_run_names_the_failing_tests() -> None:
    events = convert(raw("mini/django__django-15127.traj.json"), "mini")
    verdict = next(e for e in events if e["type"] == "verdict")
    assert verdict["passed"] is False
    assert "failed:" in verdict["output"]


def test_sweagent_edits_and_submit() -> None:
    _, events = import_sweagent(raw("sweagent/pydicom-1458.traj"))
    tools = [e.get("tool") for e in events if e["type"] == "action"]
    assert "write_file" in tools
    assert "edit_lines" in tools
    assert events[-1] == {"type": "message", "kind": "final_answer", "text": events[-1]["text"]}
    assert all(e.get("changed") for e in events if e.get("tool") == "edit_lines")


def test_openhands_pairs_actions_with_observations() -> None:
    _, events = import_openhands(raw("openhands/wrong_initial_state.json"))
    move = next(e for e in events if e["type"] == "action" and e["tool"] == "run_command")
    assert move["args"]["cmd"].startswith("mv ")
    assert move["changed"] is True
    assert move["result"]["exit_code"] == 0
    _, events = import_openhands(raw("openhands/resolver_output.jsonl"), index=0)
    assert events[-1]["type"] == "verdict"
    assert events[-1]["check"] == "resolver"


def test_openhands_v1_sdk_events() -> None:
    path = raw("openhands/sdk_goal_events.jsonl")
    events = convert(path, "openhands")
    assert [e["result"]["status"] for e in events] == ["error", "error"]
    assert events[1]["result"]["exit_code"] == 1


def test_openhands_iteration_limit_is_a_deadline(tmp_path: Path) -> None:
    row = {
        "instance_id": "x",
        "instruction": "fix it",
        "history": [
            {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls"}},
            {
                "id": 2,
                "cause": 1,
                "observation": "run",
                "content": "a.py",
                "extras": {"metadata": {"exit_code": 0}},
            },
        ],
        "error": "RuntimeError: Agent reached maximum iteration in headless mode",
    }
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(row) + "\n")
    events = convert(path, "auto")
    assert events[-1] == {"type": "signal", "name": "deadline"}


def test_claude_results_and_rounds() -> None:
    _, events = import_claude(raw("claude/subagent.jsonl"))
    assert any(e["type"] == "action" and e["tool"] == "fetch" for e in events)
    assert all(e["result"]["output"] != "no tool_result recorded" for e in events if "result" in e)
    _, events = import_claude(raw("claude/agent-aac57f5.jsonl"))
    check_rounds(events)


def test_codex_rounds_and_exit_codes() -> None:
    _, events = import_codex(raw("codex/rollout-2026-01-02T18-39-45-019b7f94.jsonl"))
    assert [e["args"]["cmd"] for e in events][:2] == ["ls", "rg --files -g 'AGENTS.md'"]
    assert {e["round"] for e in events} == {"t1"}
    assert all(e["result"]["exit_code"] == 0 for e in events)


def test_gemini_writes_and_rounds() -> None:
    _, events = import_gemini(raw("gemini/session-2026-01-16T11-01-file-ops-37b7abef.json"))
    assert any(e["type"] == "action" and e["tool"] == "write_file" for e in events)
    assert any("round" in e for e in events)


def test_inspect_scores_are_verdicts() -> None:
    header, events = import_inspect(raw("inspect/log_message_deduplication.eval"))
    assert [e["tool"] for e in events if e["type"] == "action"] == ["run_command"] * 5
    assert header["task"]["checks"] == [e["check"] for e in events if e["type"] == "verdict"]
    samples = inspect_samples(raw("inspect/2025-05-12T20-28-13-04-00_popularity.json"))
    assert len(samples) == 3
    passed = [
        convert(raw("inspect/2025-05-12T20-28-13-04-00_popularity.json"), "inspect", k)[-1][
            "passed"
        ]
        for k in range(3)
    ]
    assert passed == [True, True, False]


def test_inspect_tool_errors_map_to_status(tmp_path: Path) -> None:
    data = json.loads(raw("inspect/log_tool_call_error.json").read_text())
    sample = data["samples"][0]
    calls = [
        {"id": m["tool_call_id"], "function": "bash", "arguments": {"cmd": "x"}}
        for m in sample["messages"]
    ]
    sample["messages"] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *sample["messages"],
    ]
    path = tmp_path / "tool_errors.json"
    path.write_text(json.dumps(data))
    events = convert(path, "inspect")
    statuses = [e["result"]["status"] for e in events if e["type"] == "action"]
    assert statuses[1] == "timeout"
    assert statuses.count("error") == len(statuses) - 1


def test_mini_v2_shapes(tmp_path: Path) -> None:
    v2 = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"exit_status": "LimitsExceeded"},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "x",
                "extra": {"actions": [{"command": "ls"}, {"command": "sed -i s/a/b/ f"}]},
            },
            {"role": "user", "content": "<returncode>0</returncode><output>f</output>"},
            {"role": "user", "content": "<returncode>1</returncode><output>err</output>"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c", "function": {"name": "bash", "arguments": '{"command": "cat f"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "<returncode>0</returncode>b"},
            {"role": "assistant", "content": "no code block here"},
            {"role": "user", "content": "format error"},
            {"role": "exit", "content": "LimitsExceeded", "extra": {"exit_status": "x"}},
        ],
    }
    path = tmp_path / "v2.traj.json"
    path.write_text(json.dumps(v2))
    assert detect_format(path) == "mini"
    events = convert(path, "mini")
    assert [e["type"] for e in events] == ["action", "action", "action", "message", "signal"]
    assert events[0]["round"] == events[1]["round"]
    assert events[1]["changed"] is True
    assert events[1]["result"]["exit_code"] == 1
    assert events[2]["result"] == {"status": "ok", "output": "b", "exit_code": 0}
    assert events[-1] == {"type": "signal", "name": "deadline"}


# -- malformed input ----------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "rel"), [(f, files[0]) for f, files in REAL.items()])
def test_a_truncated_real_file_is_a_transcript_error(fmt: str, rel: str, tmp_path: Path) -> None:
    data = raw(rel).read_bytes()
    cut = tmp_path / Path(rel).name
    cut.write_bytes(data[: len(data) // 2])
    options = {"index": 0} if fmt in ("openhands", "inspect") else {}
    with pytest.raises(TranscriptError) as caught:
        import_file(cut, fmt, **options)
    error = caught.value
    assert str(cut) in str(error)
    assert error.where
    assert error.expected


BAD: list[tuple[str, str, Any, bool, str]] = [
    ("mini", "a.traj.json", {"messages": "nope"}, False, "messages"),
    ("mini", "b.traj.json", {"info": {}}, False, "messages"),
    ("mini", "c.traj.json", {"messages": [{"content": "x"}]}, False, "role"),
    ("mini", "d.traj.json", {"messages": [{"role": "assistant", "content": 5}]}, False, "content"),
    ("sweagent", "a.traj", {"trajectory": {"x": 1}, "info": {}}, False, "trajectory"),
    ("sweagent", "b.traj", {"trajectory": [{"observation": "x"}], "info": {}}, False, "action"),
    ("sweagent", "c.traj", [1, 2], False, "object"),
    ("openhands", "a.json", [{"id": 1, "action": "run", "args": {}}], False, "command"),
    ("openhands", "b.json", [{"id": 1, "source": "agent"}], False, "action"),
    ("openhands", "c.json", {"foo": 1}, False, "history"),
    ("openhands", "d.json", [{"id": 1, "action": 7}], False, "string"),
    (
        "claude",
        "a.jsonl",
        [{"type": "assistant", "sessionId": "s", "message": "t"}],
        True,
        "message",
    ),
    (
        "claude",
        "b.jsonl",
        [{"type": "assistant", "message": {"content": [{"type": "tool_use", "input": {}}]}}],
        True,
        "tool_use",
    ),
    (
        "claude",
        "c.jsonl",
        [{"type": "user", "message": {"content": [{"type": "tool_result"}]}}],
        True,
        "tool_use_id",
    ),
    ("claude", "d.jsonl", [{"type": "summary", "summary": "x", "leafUuid": "u"}], True, "records"),
    ("codex", "a.jsonl", [{"type": "response_item", "payload": "x"}], True, "payload"),
    (
        "codex",
        "b.jsonl",
        [{"type": "response_item", "payload": {"type": "function_call_output"}}],
        True,
        "call_id",
    ),
    (
        "codex",
        "c.jsonl",
        [{"type": "response_item", "payload": {"type": "function_call", "call_id": "c"}}],
        True,
        "name",
    ),
    ("gemini", "a.json", {"sessionId": "s", "messages": {}}, False, "messages"),
    ("gemini", "b.json", {"sessionId": "s", "messages": [{"content": "x"}]}, False, "type"),
    (
        "gemini",
        "c.json",
        {"messages": [{"type": "gemini", "toolCalls": [{"name": "x", "status": "weird"}]}]},
        False,
        "status",
    ),
    (
        "gemini",
        "d.json",
        {"messages": [{"type": "gemini", "toolCalls": [{"args": {}}]}]},
        False,
        "name",
    ),
    ("inspect", "a.json", {"version": 2, "samples": [{"messages": "x"}]}, False, "messages"),
    (
        "inspect",
        "b.json",
        {"version": 2, "samples": [{"messages": [{"content": "x"}]}]},
        False,
        "role",
    ),
    (
        "inspect",
        "c.json",
        {
            "samples": [
                {"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "function": 3}]}]}
            ]
        },
        False,
        "function",
    ),
    ("inspect", "d.json", {"version": 2, "samples": []}, False, "sample"),
    (
        "inspect",
        "e.json",
        {"samples": [{"messages": [], "scores": {"m": {"x": 1}}}]},
        False,
        "value",
    ),
]


@pytest.mark.parametrize(("fmt", "name", "obj", "jsonl", "word"), BAD)
def test_malformed_input_names_the_file_the_place_and_what_was_expected(
    fmt: str, name: str, obj: Any, jsonl: bool, word: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    text = "".join(json.dumps(o) + "\n" for o in obj) if jsonl else json.dumps(obj)
    path.write_text(text)
    with pytest.raises(TranscriptError) as caught:
        import_file(path, fmt)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert ": expected " in message
    assert word in message


def test_a_jsonl_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text('{"type":"session_meta","payload":{}}\n{"type": "response_item", "payl\n')
    with pytest.raises(TranscriptError) as caught:
        import_codex(path)
    assert caught.value.where == "line 2"


def test_a_missing_file_and_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="readable file"):
        import_mini(tmp_path / "nope.traj.json")
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TranscriptError, match="UTF-8"):
        import_gemini(path)


def test_an_option_a_format_does_not_take_is_refused() -> None:
    with pytest.raises(TranscriptError, match="no 'index' option for the claude format"):
        import_file(raw("claude/short.jsonl"), "claude", index=1)
    with pytest.raises(TranscriptError, match="a run index below"):
        import_file(raw("openhands/resolver_output.jsonl"), "openhands", index=99)


def test_detection_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    trajectory = '{"format":"proctor.trajectory","version":1,"task":{"kind":"build"}}\n{}\n'
    for name, text in [
        ("a.json", '{"hello": 1}'),
        ("b.txt", "plain text"),
        ("c.json", ""),
        ("d.jsonl", trajectory),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(TranscriptError):
            detect_format(path)
    archive = tmp_path / "e.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("x.txt", "x")
    with pytest.raises(TranscriptError, match="Inspect"):
        detect_format(archive)


def test_a_corrupt_eval_archive_is_a_transcript_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.eval"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", "{}")
        z.writestr("samples/1_epoch_1.json", b"\xff\xfe not json")
    with pytest.raises(TranscriptError, match=r"samples/1_epoch_1\.json"):
        import_inspect(path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "role",
                    "content",
                    "messages",
                    "history",
                    "trajectory",
                    "action",
                    "observation",
                    "payload",
                    "toolCalls",
                    "tool_calls",
                    "samples",
                    "args",
                    "name",
                    "id",
                    "cause",
                    "message",
                    "kind",
                    "status",
                    "result",
                    "info",
                    "extras",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fmt=st.sampled_from(FORMATS), value=JSON, jsonl=st.booleans())
def test_hostile_json_gives_a_trajectory_or_a_transcript_error(
    fmt: str, value: Any, jsonl: bool, tmp_path: Path
) -> None:
    path = tmp_path / ("t.jsonl" if jsonl else "t.json")
    rows = value if jsonl and isinstance(value, list) else [value]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) if jsonl else json.dumps(value))
    try:
        header, events = import_file(path, fmt)
    except TranscriptError as exc:
        message = str(exc)
    else:
        parse_trajectory(lines_of(header, events))
        return
    assert message.startswith(f"{path}: ")
    assert ": expected " in message


# -- the `changed` rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        "sed -i 's/a/b/' f.py",
        "echo hi > out.txt",
        "cat <<'EOF' > x.py\nprint(1)\nEOF",
        "printf x >> log",
        "tee out.txt < in",
        "mv a b",
        "cp a b",
        "rm -f x",
        "touch x",
        "mkdir -p d",
        "patch -p1 < fix.diff",
        "git apply fix.diff",
        "git checkout -- f.py",
        "git stash",
        "cd src && sed -i.bak s/x/y/ a.c",
        "python -c \"open('f','w').write('x')\"",
        "python3 - <<'EOF'\nfrom pathlib import Path\nPath('a').write_text('b')\nEOF",
        "black src",
        "perl -pi -e 's/a/b/' f",
        "npm install",
        "tar xzf a.tgz",
        "ls && rm x",
    ],
)
def test_commands_that_may_change_files(cmd: str) -> None:
    assert shell_may_change(cmd)


@pytest.mark.parametrize(
    "cmd",
    [
        "cat f.py",
        "grep -rn 'x > y' src",
        "ls -la",
        "find . -name '*.py'",
        "head -50 a",
        "sed -n '1,20p' f",
        "python reproduce.py",
        "pytest -q 2>&1 | tail",
        "grep x f > /dev/null",
        "cmd 2>&1",
        "git status",
        "git diff",
        "git log --oneline",
        "nl -ba f | sed -n 1,5p",
        "echo done",
        "tee /dev/null",
        "rg foo",
        "black --check src",
        "",
    ],
)
def test_commands_that_only_read(cmd: str) -> None:
    assert not shell_may_change(cmd)


@given(st.text(max_size=200))
def test_the_changed_rule_never_raises(cmd: str) -> None:
    assert shell_may_change(cmd) in (True, False)


@given(st.text(max_size=5000), st.integers(min_value=0, max_value=3000))
def test_trimming_is_bounded_and_deterministic(text: str, limit: int) -> None:
    out = trim(text, limit)
    assert out == trim(text, limit)
    if not limit or len(text) <= limit:
        assert out == text
    else:
        assert out.startswith(text[: limit // 2])
        assert out.endswith(text[len(text) - limit // 2 :])
        assert f"[... {len(text) - 2 * (limit // 2)} characters trimmed by importer ...]" in out
    assert trim(None) == ""
    assert len(trim("x" * (MAX_OUTPUT + 1))) < MAX_OUTPUT + 100


# -- proctor import -------------------------------------------------------------------


def proctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_proctor_import_writes_what_proctor_replay_reads(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    done = proctor(
        "import", "auto", str(raw("mini/django__django-16255.traj.json")), "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    replayed = proctor("replay", str(out), "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["disposition"] == "completed"
    # The format given by --format, or told from the file, converts the same.
    by_option = proctor(
        "import", str(raw("mini/django__django-16255.traj.json")), "--format", "mini"
    )
    assert by_option.returncode == 0, by_option.stderr
    assert by_option.stdout == out.read_text(encoding="utf-8")


def test_proctor_import_picks_a_run_with_index() -> None:
    done = proctor(
        "import", "openhands", str(raw("openhands/resolver_output.jsonl")), "--index", "1"
    )
    assert done.returncode == 0, done.stderr
    first = proctor("import", "openhands", str(raw("openhands/resolver_output.jsonl")))
    assert done.stdout != first.stdout


def test_proctor_import_bad_input_is_exit_2_with_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "a.traj.json"
    bad.write_text('{"messages": 3}')
    done = proctor("import", "mini", str(bad))
    assert done.returncode == 2
    assert f"{bad}: top level: expected field 'messages'" in done.stderr
    assert "Traceback" not in done.stderr
    for args, words in [
        (("import", "nosuch", str(bad)), "FORMAT 'nosuch'"),
        (("import", "mini", str(bad), "--format", "codex"), "disagree"),
        (("import", "claude", str(raw("claude/short.jsonl")), "--index", "2"), "no 'index'"),
        (("import", str(tmp_path / "missing.json")), "readable file"),
    ]:
        done = proctor(*args)
        assert done.returncode == 2, args
        assert words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
