"""
The run report: read from a real journal, written by the real CLI, opened in a
real headless Chromium that must draw every chart without an error or a request.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from tests.support.browser import open_page

from proctor import Budget, Task, run
from proctor.runtime import (
    FunctionActor,
    Observation,
    Proposal,
    RunView,
    ToolCall,
    format_spend,
    load_run_view,
    open_journal,
    show_renderable,
    trace_table,
)
from proctor.runtime._records import ActionEvent, ActionResult, Completion, Message, MessageKind
from proctor.runtime._report import format_amount, render_report
from proctor.runtime._report.html import OUTPUT_LIMIT
from proctor.runtime._report.terminal import clip
from proctor.runtime._report.view import action_text
from proctor.verifiers import CommandCheck

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "build_rescue"
FIVE_MB = 5 * 1024 * 1024
#: What the actor writes to try to run script in the report.
HOSTILE = "</script><script>window.pwned=1</script><img src=x onerror='window.pwned=2'>"


def proctor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def rescue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The build-rescue example, run by the CLI into its own journal."""
    where = tmp_path_factory.mktemp("rescue")
    shutil.copytree(EXAMPLE, where / "build_rescue")
    journal = where / "proctor.db"
    done = proctor("run", str(where / "build_rescue" / "task.toml"), "--journal", str(journal))
    assert done.returncode == 0, done.stdout + done.stderr
    listed = proctor("runs", "--journal", str(journal), "--json")
    return journal, json.loads(listed.stdout)[0]["run_id"]


def _long_task(root: Path, steps: int) -> Task:
    root.mkdir(parents=True)
    (root / "notes.txt").write_text("start\n")
    return Task(
        goal=f"a long run {HOSTILE}",
        workspace=root,
        checks=(CommandCheck("ok", [sys.executable, "-c", "pass"]),),
        budget=Budget.of(steps=steps + 50, reserve={"steps": 5}),
    )


async def _long_run(root: Path, journal: Path, steps: int) -> str:
    """A run of ``steps`` steps: writes, failing reads, repeats (nudged), hostile text."""
    count = 0

    async def propose(observation: Observation) -> Proposal | None:
        nonlocal count
        count += 1
        if count > steps:
            return Completion("done")
        if count % 100 == 1:
            # Few writes: each is an effect, committed durably before it runs.
            return ToolCall("write_file", {"path": f"f{count}.txt", "content": str(count)})
        if count % 10 in (9, 0):
            return ToolCall("read_file", {"path": "notes.txt"})
        if count % 10 == 5:
            return Message(MessageKind.CHECKPOINT, f"step {count} {HOSTILE}")
        # A tool error whose output carries markup, different at every step.
        return ToolCall("read_file", {"path": f"missing-{count}-{HOSTILE}.txt"})

    result = await run(_long_task(root, steps), FunctionActor(propose), journal)
    return result.run_id


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    where = tmp_path_factory.mktemp("long")
    journal = where / "proctor.db"
    run_id = anyio.run(_long_run, where / "ws", journal, 10_000, backend="asyncio")
    return journal, run_id


def _canvases_drawn(page: object) -> list[int]:
    expression = """
        Array.from(document.querySelectorAll('canvas')).map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) n++;
            return n;
        })
    """
    return page.evaluate(expression)  # type: ignore[attr-defined, no-any-return]


def test_the_rescue_report_draws_every_chart_offline(
    rescue: tuple[Path, str], tmp_path: Path
) -> None:
    journal, run_id = rescue
    out = tmp_path / "report.html"
    done = proctor("report", run_id[:8], "--journal", str(journal), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    assert out.stat().st_size < FIVE_MB
    page_text = out.read_text()
    assert "http://" not in page_text.replace("http://www.w3.org", "")
    with open_page(out) as (page, problems):
        assert problems == []
        charts = int(page.evaluate("document.body.getAttribute('data-charts')"))
        # steps, tool_calls and wall_seconds; the no-progress counter; durations.
        assert charts == 5
        drawn = _canvases_drawn(page)
        assert len(drawn) == charts
        assert all(n > 500 for n in drawn), drawn
        rows = page.evaluate("document.querySelectorAll('table.steps tr').length")
        assert rows == 1 + 15
        text = page.evaluate("document.body.innerText")
        assert "checks_passed" in text
        shown = json.loads(proctor("show", run_id, "--journal", str(journal), "--json").stdout)
        assert f"candidate {shown['candidate'][:12]} (final)" in text
        # The failing test's output is in the timeline, one click away.
        assert page.evaluate("document.querySelectorAll('table.steps details').length") >= 2
        html = page.evaluate("document.body.innerHTML")
        assert "assert 1000 == 900" in html


def test_a_ten_thousand_step_report_stays_small_and_renders(
    long_run: tuple[Path, str], tmp_path: Path
) -> None:
    journal, run_id = long_run
    out = tmp_path / "long.html"
    done = proctor("report", run_id, "--journal", str(journal), "-o", str(out))
    assert done.returncode == 0, done.stderr
    size = out.stat().st_size
    assert size < FIVE_MB, size
    with open_page(out) as (page, problems):
        assert problems == []
        assert page.evaluate("window.pwned === undefined")
        assert page.evaluate("document.querySelectorAll('img').length") == 0
        drawn = _canvases_drawn(page)
        assert len(drawn) >= 3
        assert all(n > 500 for n in drawn), drawn
        rows = page.evaluate("document.querySelectorAll('table.steps tr').length")
        assert rows > 10_000
        # The actor's markup arrives as text, where it was written.
        assert page.evaluate(f"document.body.innerText.includes({json.dumps(HOSTILE)})")
        nudges = page.evaluate("document.querySelectorAll('tr.d-nudge').length")
        assert nudges > 100


def test_compare_sets_two_runs_side_by_side(
    rescue: tuple[Path, str], long_run: tuple[Path, str], tmp_path: Path
) -> None:
    # Two journals cannot be compared in one call: put both runs in one by
    # comparing the rescue run with itself, and check the two-run layout.
    journal, run_id = rescue
    out = tmp_path / "compare.html"
    done = proctor("report", "--compare", run_id, run_id, "--journal", str(journal), "-o", str(out))
    assert done.returncode == 0, done.stderr
    with open_page(out) as (page, problems):
        assert problems == []
        assert all(n > 500 for n in _canvases_drawn(page))
        labels = page.evaluate(
            "Array.from(document.querySelectorAll('.u-legend th')).map(t => t.innerText)"
        )
        assert any(label.startswith("A ") for label in labels)
        assert any(label.startswith("B ") for label in labels)
        assert page.evaluate("document.querySelectorAll('table.steps').length") == 2


def test_report_refuses_bad_arguments(rescue: tuple[Path, str], tmp_path: Path) -> None:
    journal, run_id = rescue
    one = proctor("report", "--compare", run_id, "--journal", str(journal))
    assert one.returncode == 2
    assert "--compare needs two runs" in one.stderr
    assert "Traceback" not in one.stderr
    nowhere = proctor("report", run_id, "--journal", str(journal), "-o", "/nonexistent/d/r.html")
    assert nowhere.returncode == 2
    assert "cannot write" in nowhere.stderr
    assert "Traceback" not in nowhere.stderr
    missing = proctor("report", run_id, "--journal", str(tmp_path / "typo.db"))
    assert missing.returncode == 2
    assert "no such file" in missing.stderr
    assert not (tmp_path / "typo.db").exists()


async def test_the_view_charges_each_step_and_times_it(rescue: tuple[Path, str]) -> None:
    journal, run_id = rescue
    async with open_journal(journal) as j:
        view = await load_run_view(j, run_id)
    assert [s.step for s in view.steps] == list(range(1, len(view.steps) + 1))
    # Every tool call of the run is charged to exactly one step.
    charged = sum(s.spend.get("tool_calls", 0.0) for s in view.steps)
    assert charged == view.spent["tool_calls"]
    # The steps tile the run: each starts where the one before it was journaled.
    assert all(b.started_at == a.ended_at for a, b in itertools.pairwise(view.steps))
    assert all(s.duration >= 0 for s in view.steps)
    assert view.steps[0].started_at == view.run.started_at
    # A failed run's output is kept on its step; a nudge shows on the counter.
    failing = [s for s in view.steps if s.output]
    assert failing
    assert "assert 1000 == 900" in (failing[0].output or "")
    nudged = [s for s in view.steps if s.decision == "nudge"]
    assert nudged
    assert all(s.stall >= 2 for s in nudged)
    assert view.candidates[-1].final
    assert view.failing_excerpt is None


def test_a_long_output_is_cut_to_its_tail(tmp_path: Path) -> None:
    async def go() -> str:
        journal = tmp_path / "j.db"
        root = tmp_path / "ws"
        root.mkdir()
        huge = f"print('x' * {OUTPUT_LIMIT * 3} + 'THE END'); raise SystemExit(3)"
        calls = [ToolCall("run_command", {"cmd": f'python -c "{huge}"'})]

        async def propose(observation: Observation) -> Proposal | None:
            return calls.pop() if calls else None

        task = Task(
            goal="fail",
            workspace=root,
            checks=(CommandCheck("no", [sys.executable, "-c", "raise SystemExit(1)"]),),
            budget=Budget.of(steps=5),
        )
        result = await run(task, FunctionActor(propose), journal)
        async with open_journal(journal) as j:
            return render_report(await load_run_view(j, result.run_id))

    page = anyio.run(go, backend="asyncio")
    assert "THE END" in page
    assert "x" * (OUTPUT_LIMIT + 10) not in page


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_money_is_never_shown_as_free_when_it_is_not(value: float) -> None:
    text = format_amount("cost_usd", value)
    assert text.startswith("$")
    if value >= 0.00005:
        assert text not in ("$0.00", "$0.0000")
    if value >= 0.005:
        # To the cent.
        assert len(text.rsplit(".", 1)[1]) == 2


def test_spend_puts_the_usual_dimensions_first() -> None:
    text = format_spend(
        {"wall_seconds": 12.345, "cost_usd": 0.0033, "steps": 3, "tool_calls:read_file": 2}
    )
    assert text == "steps 3, cost $0.0033, wall 12.3s"


@given(st.text(), st.text())
def test_an_action_summary_is_one_line(tool: str, path: str) -> None:
    event = ActionEvent(tool=tool, args={"path": path}, result=ActionResult(status="ok"))
    text = action_text("action", event, None)
    assert "\n" not in text
    assert "\r" not in text


def _render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text().splitlines()


def _cells_are_whole_or_marked(lines: list[str], view: RunView) -> None:
    """Every action shown is the step's whole action, or a prefix ending in an ellipsis."""
    for step in view.steps:
        row = next(line for line in lines if line.lstrip().startswith(f"{step.step}  "))
        shown = row.lstrip()[len(str(step.step)) :].lstrip()
        if shown.startswith(step.action):
            continue
        cell = shown.split("\u2026", 1)[0]
        assert "\u2026" in shown, (step.action, row)
        assert step.action.startswith(cell.rstrip()), (step.action, row)


@pytest.mark.parametrize("width", [80, 200])
async def test_show_fits_the_terminal_and_marks_every_cut(
    rescue: tuple[Path, str], width: int
) -> None:
    journal, run_id = rescue
    async with open_journal(journal) as j:
        view = await load_run_view(j, run_id)
    lines = _render(show_renderable(view, width=width), width)
    assert all(len(line) <= width for line in lines)
    header = next(line for line in lines if line.startswith("step"))
    for column in ("action", "decision", "time", "cost"):
        assert column in header.split()
    if width >= 120:
        assert {"progress", "left", "tokens"} <= set(header.split())
    _cells_are_whole_or_marked(lines, view)
    # Every step shows its seconds.
    assert all(re.search(r" \d+\.\ds ", line) for line in lines if "run_command" in line)
    assert any(line.startswith("spent:") for line in lines)


async def test_show_wide_cuts_nothing(rescue: tuple[Path, str]) -> None:
    journal, run_id = rescue
    async with open_journal(journal) as j:
        view = await load_run_view(j, run_id)
    text = "\n".join(_render(trace_table(view, width=80, wide=True), 200))
    assert "\u2026" not in text
    assert "2 steps without progress (repeated work)" in text


def test_a_failed_check_shows_why_in_the_handoff(tmp_path: Path) -> None:
    where = tmp_path / "fail"
    shutil.copytree(EXAMPLE, where)
    # The agent claims it is done without fixing anything: the tests fail.
    (where / "agent.jsonl").write_text(
        '{"type": "action", "tool": "list_files", "args": {"path": "."}}\n'
        '{"type": "complete", "summary": "nothing to fix"}\n'
    )
    journal = tmp_path / "j.db"
    done = proctor("run", str(where / "task.toml"), "--journal", str(journal))
    assert done.returncode != 0
    assert "why it failed" in done.stdout
    assert "assert 1000 == 900" in done.stdout
    listed = json.loads(proctor("runs", "--journal", str(journal), "--json").stdout)
    shown = proctor("show", listed[0]["run_id"], "--journal", str(journal))
    assert "why it failed" in shown.stdout
    assert "assert 1000 == 900" in shown.stdout


def test_runs_filters_by_status_and_age(rescue: tuple[Path, str]) -> None:
    journal, run_id = rescue
    done = proctor("runs", "--journal", str(journal), "--status", "completed", "--json")
    assert [r["run_id"] for r in json.loads(done.stdout)] == [run_id]
    none = proctor("runs", "--journal", str(journal), "--status", "failed", "--json")
    assert json.loads(none.stdout) == []
    recent = proctor("runs", "--journal", str(journal), "--since", "1h", "--json")
    assert len(json.loads(recent.stdout)) == 1
    future = proctor("runs", "--journal", str(journal), "--since", "2999-01-01", "--json")
    assert json.loads(future.stdout) == []
    bad = proctor("runs", "--journal", str(journal), "--since", "yesterday")
    assert bad.returncode == 2
    assert "--since 'yesterday': expected an ISO date" in bad.stderr
    table = proctor("runs", "--journal", str(journal))
    assert "completed" in table.stdout


@given(st.text(), st.integers(min_value=1, max_value=60))
def test_clip_never_cuts_silently(text: str, width: int) -> None:
    out = clip(text, width)
    assert len(out) <= max(width, 1)
    if out != text:
        assert out.endswith("\u2026")
        assert text.startswith(out[:-1].rstrip())


async def test_on_call_names_each_call_before_it_runs(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    calls = [ToolCall("list_files", {"path": "."}), ToolCall("read_file", {"path": "x"})]
    seen: list[tuple[int, str]] = []

    async def propose(observation: Observation) -> Proposal | None:
        return calls.pop(0) if calls else None

    task = Task(
        goal="look",
        workspace=root,
        checks=(CommandCheck("ok", [sys.executable, "-c", "pass"]),),
        budget=Budget.of(steps=10),
    )
    await run(
        task,
        FunctionActor(propose),
        tmp_path / "j.db",
        on_call=lambda step, call: seen.append((step, call.tool)),
    )
    assert seen == [(1, "list_files"), (2, "read_file")]


def test_a_refused_call_reads_like_the_call_it_refused() -> None:
    # After the end, a refused call is journaled with its action and no event:
    # it is shown as the same call would be, not as its arguments' JSON.
    action = json.dumps({"tool": "fetch", "args": {"url": "http://127.0.0.1:8765/zoneinfo"}})
    ran = ActionEvent(
        tool="fetch",
        args={"url": "http://127.0.0.1:8765/zoneinfo"},
        result=ActionResult(status="ok"),
    )
    assert action_text("action", None, action) == action_text("action", ran, None)
    assert action_text("action", None, action) == "fetch http://127.0.0.1:8765/zoneinfo"
    assert action_text("action", None, '{"tool": 3}') == '{"tool": 3}'
