"""
Snapshots of the decision core: a judge restored from a snapshot decides as the
judge it was taken from, and a resume that starts from one inherits what a
resume that feeds the whole history inherits.
"""

from __future__ import annotations

import collections
import json
import shutil
import sqlite3
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.test_journal import backend, journal, new_run, target  # noqa: F401

from proctor import (
    Budget,
    CommandCheck,
    Completion,
    Disposition,
    Policy,
    Proposal,
    Round,
    ScriptedActor,
    Task,
    ToolCall,
    run,
)
from proctor.runtime import JournalLike, open_journal, resume
from proctor.runtime._control import history as history_module
from proctor.runtime._control.history import load_history, save_snapshot, snapshot_due
from proctor.runtime._progress.judge import (
    SNAPSHOT_FORMAT,
    Act,
    Judge,
    Refused,
    Ruling,
    SnapshotRefused,
    TaskFacts,
    Verdict,
)
from proctor.runtime._progress.workset import WorkSet
from proctor.runtime._records import (
    Claim,
    Message,
    MessageKind,
    StopReason,
    ToolResult,
    ToolStatus,
)

# -- one judge, fed a sequence of events ------------------------------------------------

DIGESTS = ("d0", "d1", "d2", "d3")
URLS = ("https://a.example/x", "https://b.example/y")
OUTPUTS = (
    "",
    "ok",
    "1 passed in 0.01s",
    "FAILED tests/test_calc.py::test_add - assert 1 == 5",
    "HTTP 503 Service Unavailable",
    "Traceback (most recent call last):\nValueError: bad",
)

tools = st.sampled_from(
    ("read_file", "write_file", "run_command", "fetch", "search", "noop", "list_files")
)


@st.composite
def calls(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "tool": draw(tools),
        "arg": draw(st.sampled_from(("a.py", "b.py", "pytest -q", "python -m pytest -q"))),
        "url": draw(st.sampled_from(URLS)),
        "content": draw(st.sampled_from(("x", "y"))),
        "status": draw(st.sampled_from((ToolStatus.OK, ToolStatus.ERROR, ToolStatus.UNCERTAIN))),
        "output": draw(st.sampled_from(OUTPUTS)),
        "exit": draw(st.sampled_from((None, 0, 1))),
        "after": draw(st.sampled_from((None, *DIGESTS))),
        "poll": draw(st.booleans()),
    }


events = st.one_of(
    st.tuples(st.just("round"), st.lists(calls(), min_size=1, max_size=3)),
    st.tuples(
        st.just("message"),
        st.sampled_from(list(MessageKind)),
        st.sampled_from(("", "done", "still working")),
        st.lists(st.sampled_from(URLS), max_size=2),
        st.lists(st.sampled_from(("no network",)), max_size=1),
    ),
    st.tuples(
        st.just("verdict"),
        st.sampled_from(("tests", "lint")),
        st.booleans(),
        st.sampled_from((None, *DIGESTS)),
        st.sampled_from(OUTPUTS),
        st.sampled_from(("", "v2")),
    ),
    st.tuples(
        st.just("claim"),
        st.sampled_from(("blocked", "needs_input")),
        st.sampled_from(("", "no credentials")),
        st.lists(st.sampled_from(("tried login",)), max_size=1),
        st.sampled_from(("", "nothing permitted reaches it")),
    ),
    st.tuples(st.just("signal"), st.sampled_from(("stop_signal", "user_stop", "deadline"))),
    st.tuples(st.sampled_from(("exhausted", "fail", "user", "reopen", "accept"))),
    st.tuples(st.just("observe"), st.sampled_from(DIGESTS)),
    st.tuples(st.just("amend"), st.sampled_from(("v2", "v3"))),
)

policies = st.builds(
    Policy,
    stall_threshold=st.sampled_from((0, 2, 3, 4)),
    identical_response_threshold=st.sampled_from((0, 2, 3)),
    poll_limit=st.integers(1, 3),
    rescue_limit=st.integers(0, 2),
    refuse_repeats=st.booleans(),
)

facts = st.builds(
    TaskFacts,
    kind=st.sampled_from(("build", "answer")),
    checks=st.sampled_from(((), ("tests",), ("tests", "lint"))),
    protected=st.sampled_from(((), ("b.py",))),
    required_files=st.sampled_from(((), ("README.md",))),
)


def _call(spec: Mapping[str, Any]) -> ToolCall:
    tool = spec["tool"]
    args: dict[str, Any]
    if tool == "run_command":
        args = {"cmd": spec["arg"]}
    elif tool == "fetch":
        args = {"url": spec["url"]}
    elif tool == "search":
        args = {"query": spec["arg"]}
    elif tool == "write_file":
        args = {"path": spec["arg"], "content": spec["content"]}
    else:
        args = {"path": spec["arg"]}
    return ToolCall(tool, args, poll=spec["poll"])


Outcome = list[Ruling | str | None] | Ruling | bool | None


def feed(judge: Judge, event: tuple[Any, ...]) -> Outcome:
    """Give ``judge`` one event, as the controller or a replay would; return what it said."""
    kind = event[0]
    if kind == "round":
        items: list[Act | Refused] = []
        admitted: list[Ruling | str | None] = []
        for spec in event[1]:
            call = _call(spec)
            refusal = judge.admit(call)
            admitted.append(refusal)
            if refusal is not None:
                items.append(Refused(call, refusal))
                continue
            result = ToolResult(spec["status"], spec["output"], spec["exit"])
            after = spec["after"] or judge.digest
            items.append(Act(call, result, judge.digest, after))
        return [*admitted, *judge.round(items)]
    if kind == "message":
        _, mkind, text, sources, blockers = event
        return judge.message(Message(mkind, text, tuple(sources), tuple(blockers)))
    if kind == "verdict":
        _, check, passed, of, output, contract = event
        return judge.verdict(Verdict(check, passed, of or judge.digest, output, contract))
    if kind == "claim":
        _, status, condition, evidence, reason = event
        return judge.claim(Claim(status, condition, tuple(evidence), reason))
    if kind == "signal":
        return judge.signal(event[1])
    if kind == "exhausted":
        return judge.exhausted(StopReason("limit:steps", "out of steps", "operator", limit="steps"))
    if kind == "fail":
        return judge.fail("actor_crashed", "the actor crashed")
    if kind == "user":
        return judge.user("try the other module")
    if kind == "reopen":
        judge.reopen()
        return None
    if kind == "accept":
        return judge.accept()
    if kind == "observe":
        return judge.observe_candidate(event[1])
    judge.amend(attrs.evolve(judge.task, protected=("a.py",)), event[1])
    return None


# Caches derived from the task facts: not state, not in a snapshot.
CACHES = {"_declared"}


def _plain(value: Any) -> Any:
    """A comparable form of a judge's attribute, walking attrs classes field by field."""
    if attrs.has(type(value)) and not isinstance(value, TaskFacts | Policy | StopReason):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if f.name not in CACHES
        }
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, set):
        return frozenset(value)
    if isinstance(value, collections.deque):
        return (list(value), value.maxlen)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def state(judge: Judge) -> dict[str, Any]:
    """Every field of the judge (and of its window and work set), caches aside."""
    plain = _plain(judge)
    assert isinstance(plain, dict)
    return plain


def as_json(snapshot: Mapping[str, Any]) -> Any:
    """A snapshot as the journal gives it back."""
    return json.loads(json.dumps(snapshot))


@given(
    task=facts,
    policy=policies,
    missing=st.booleans(),
    script=st.lists(events, max_size=40),
    data=st.data(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_restored_judge_decides_and_ends_as_the_one_fed_everything(
    task: TaskFacts,
    policy: Policy,
    missing: bool,
    script: list[tuple[Any, ...]],
    data: st.DataObject,
) -> None:
    def missing_files() -> tuple[str, ...]:
        return ("README.md",) if missing else ()

    cut = data.draw(st.integers(0, len(script)), label="cut")
    whole = Judge(task, policy, "d0", missing_files, contract_version="v1")
    said = [feed(whole, event) for event in script[:cut]]
    snapshot = as_json(whole.snapshot())
    # The rest of the judge is rebuilt from the snapshot alone.
    restored = Judge(whole.task, policy, "elsewhere", missing_files, contract_version="v9")
    restored.restore(snapshot)
    assert state(restored) == state(whole)
    said_after = [feed(restored, event) for event in script[cut:]]
    said += [feed(whole, event) for event in script[cut:]]
    assert said_after == said[cut:]
    assert state(restored) == state(whole)
    assert restored.work_fingerprint == whole.work_fingerprint
    assert restored.stall == whole.stall
    assert restored.snapshot() == whole.snapshot()


def _rich_judge() -> Judge:
    """A judge whose every field has left its default."""
    judge = Judge(
        TaskFacts(checks=("tests",), required_files=("README.md",)),
        Policy(stall_threshold=3, rescue_limit=1),
        "d0",
        lambda: ("README.md",),
        contract_version="v1",
    )
    ok = ToolResult(ToolStatus.OK, "x")
    poll = ToolCall("run_command", {"cmd": "make status"}, poll=True)
    fail = ToolCall("run_command", {"cmd": "pytest -q"})
    failed = ToolResult(ToolStatus.ERROR, "FAILED test_a", 1)
    judge.round([Act(ToolCall("fetch", {"url": URLS[0]}), ok, "d0", "d0")])
    judge.round([Act(poll, ToolResult(ToolStatus.OK, "running", 0), "d0", "d0")])
    judge.round([Act(ToolCall("write_file", {"path": "a.py"}), ok, "d0", "d1")])
    judge.verdict(Verdict("tests", False, "d1", "FAILED test_a", "v1"))
    judge.round([Act(fail, failed, "d1", "d1")])
    judge.round([Act(fail, failed, "d1", "d1")])
    judge.message(Message(MessageKind.CHECKPOINT, "working"))
    # Three steps without progress, required files missing: a rescue, whose
    # instruction is still to be given.
    judge.claim(Claim("blocked"))
    judge.verdict(Verdict("tests", False, "d1", "FAILED test_a", "v1"))
    judge.signal("user_stop")
    return judge


def test_every_field_leaves_its_default_in_the_rich_judge_and_survives() -> None:
    judge = _rich_judge()
    fresh = Judge(judge.task, judge.policy, "d0", judge.missing_files, contract_version="v1")
    before, untouched = state(judge), state(fresh)
    window, fresh_window = before.pop("_window"), untouched.pop("_window")
    same = [name for name in before if before[name] == untouched[name]]
    # Settled by the constructor's arguments, not by what happened.
    assert sorted(same) == ["contract_version", "missing_files", "policy", "policy_version", "task"]
    assert [n for n in window if window[n] == fresh_window[n]] == []
    restored = Judge(judge.task, judge.policy, "x", judge.missing_files)
    restored.restore(as_json(judge.snapshot()))
    assert state(restored) == state(judge)


def test_a_snapshot_is_plain_json_and_follows_the_state_not_the_history() -> None:
    judge = Judge(TaskFacts(), Policy(stall_threshold=0), "d0")
    read = ToolCall("read_file", {"path": "a.py"})
    for _ in range(200):
        judge.round([Act(read, ToolResult(ToolStatus.OK, "same"), "d0", "d0")])
    small = json.dumps(judge.snapshot())
    assert as_json(judge.snapshot()) == json.loads(small)
    for i in range(200):
        call = ToolCall("read_file", {"path": f"f{i}.py"})
        judge.round([Act(call, ToolResult(ToolStatus.OK, str(i)), "d0", "d0")])
    # 200 distinct actions more: their work items and outcomes, about 45 bytes each.
    assert 30 * 200 < len(json.dumps(judge.snapshot())) - len(small) < 60 * 200


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda s: s.update(format=SNAPSHOT_FORMAT + 1), "format"),
        (lambda s: s.update(policy_version="p1-other"), "policy"),
        (lambda s: s.update(facts="0" * 32), "task facts"),
        (lambda s: s.pop("window"), "not a snapshot"),
        (lambda s: s.update(actions="3"), "not a snapshot"),
        (lambda s: s["window"]["work"].update(total="0" * 32), "add up"),
        (lambda s: s["window"].update(outcome_values=""), "outcomes"),
        (lambda s: s["window"].update(shapes=[["zz", "x"]]), "not a snapshot"),
        (lambda s: s.update(disposition="finished"), "not a snapshot"),
    ],
)
def test_a_snapshot_that_does_not_fit_is_refused_and_changes_nothing(
    change: Callable[[dict[str, Any]], object], why: str
) -> None:
    snapshot = as_json(_rich_judge().snapshot())
    change(snapshot)
    judge = Judge(
        TaskFacts(checks=("tests",), required_files=("README.md",)),
        Policy(stall_threshold=3, rescue_limit=1),
        "d7",
    )
    before = state(judge)
    with pytest.raises(SnapshotRefused, match=why):
        judge.restore(snapshot)
    assert state(judge) == before


def test_a_snapshot_under_other_task_facts_or_policy_is_refused() -> None:
    snapshot = as_json(_rich_judge().snapshot())
    other_facts = Judge(
        TaskFacts(checks=("lint",)), Policy(stall_threshold=3, rescue_limit=1), "d0"
    )
    with pytest.raises(SnapshotRefused, match="task facts"):
        other_facts.restore(snapshot)
    same_facts = TaskFacts(checks=("tests",), required_files=("README.md",))
    with pytest.raises(SnapshotRefused, match="policy"):
        Judge(same_facts, Policy(stall_threshold=4, rescue_limit=1), "d0").restore(snapshot)
    with pytest.raises(SnapshotRefused, match="JSON object"):
        Judge(same_facts, Policy(), "d0").restore([])  # type: ignore[arg-type]


@given(st.lists(st.lists(st.text(max_size=5), max_size=3).map(tuple), max_size=30))
def test_a_work_set_survives_its_snapshot(items: list[tuple[str, ...]]) -> None:
    work = WorkSet()
    for item in items:
        work.add(*item)
    copy = WorkSet.from_snapshot(as_json(work.snapshot()))
    assert copy.fingerprint == work.fingerprint
    assert len(copy) == len(work)
    assert all(item in copy for item in items)
    assert copy.snapshot() == work.snapshot()
    assert copy.add("new") == work.add("new")
    assert copy.fingerprint == work.fingerprint


def test_a_work_set_snapshot_that_does_not_add_up_is_rejected() -> None:
    work = WorkSet()
    work.add("a")
    work.add("b")
    data = work.snapshot()
    with pytest.raises(ValueError, match="holds"):
        WorkSet.from_snapshot({**data, "items": 3})
    with pytest.raises(ValueError, match="add up"):
        WorkSet.from_snapshot({**data, "total": "1" * 32})
    with pytest.raises(ValueError, match="not a work set"):
        WorkSet.from_snapshot({**data, "hashes": "not base64!"})


# -- the journal: the latest note of a kind (a resume reads the start note so) -----------


async def test_latest_note_is_the_newest_of_its_kind(journal: JournalLike) -> None:  # noqa: F811
    await new_run(journal, "run-a")
    await new_run(journal, "run-b")
    assert await journal.latest_note("run-a", "start") is None
    await journal.add_note("run-a", "start", {"step": 1})
    await journal.add_note("run-a", "effect", {"key": "k"})
    await journal.add_note("run-b", "start", {"step": 7})
    await journal.add_note("run-a", "start", {"step": 2, "é": [1.5, None]})
    await journal.add_note("run-a", "effect", {"key": "k2"})
    latest = await journal.latest_note("run-a", "start")
    assert latest is not None
    # Shaped as notes() shapes it.
    assert latest == [n for n in await journal.notes("run-a") if n["kind"] == "start"][-1]
    assert latest["body"] == {"step": 2, "é": [1.5, None]}
    b = await journal.latest_note("run-b", "start")
    assert b is not None
    assert b["body"] == {"step": 7}
    assert await journal.latest_note("run-b", "effect") is None
    assert await journal.latest_note("no-such-run", "start") is None


# -- a resume from a snapshot inherits what a resume from every step inherits -----------

PY = sys.executable
# The check and the failing command: the same test, without pytest's start-up time.
CHECK = (PY, "-c", "import calc; assert calc.add(2, 3) == 5, 'add(2, 3) is not 5'")
FAIL = ToolCall("run_command", {"cmd": " ".join((PY, "-c", f'"{CHECK[2]}"'))})
FIX = ToolCall("edit_file", {"path": "calc.py", "old": "a - b", "new": "a + b"})
READ = ToolCall("read_file", {"path": "calc.py"})
LIST = ToolCall("list_files", {"path": "."})


def _project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return root


def _task(root: Path) -> Task:
    return Task(
        goal="make add add",
        workspace=root,
        checks=(CommandCheck("add", CHECK),),
        task_id="calc-fix",
        budget=Budget({"steps": 40}),
    )


async def _inherited(db: Path, task: Task, *, snapshots: bool) -> tuple[Any, Judge]:
    judge = Judge(task.facts(), task.policy, "d-now", contract_version=task.contract_version)
    async with open_journal(db) as j:
        found = await load_history(j, "calc-fix", "next-run", judge, snapshots=snapshots)
    return found, judge


async def _same_either_way(db: Path, task: Task) -> Judge:
    with_snapshot, judge = await _inherited(db, task, snapshots=True)
    replayed, again = await _inherited(db, task, snapshots=False)
    assert with_snapshot == replayed
    assert state(judge) == state(again)
    assert judge.snapshot() == again.snapshot()
    return judge


async def _log_snapshots(db: Path) -> None:
    """
    Create the journal and keep a log of every snapshot written to it: each
    replaces its run's last in the journal, the log keeps them all.
    """
    async with open_journal(db):
        pass
    with sqlite3.connect(db) as conn:
        conn.executescript(
            """
            CREATE TABLE snapshot_log (
                id INTEGER PRIMARY KEY, run_id TEXT, step INTEGER, body TEXT, at REAL
            );
            CREATE TRIGGER snapshot_inserted AFTER INSERT ON snapshots BEGIN
                INSERT INTO snapshot_log (run_id, step, body, at)
                VALUES (new.run_id, new.step, new.body, new.at);
            END;
            CREATE TRIGGER snapshot_replaced AFTER UPDATE ON snapshots BEGIN
                INSERT INTO snapshot_log (run_id, step, body, at)
                VALUES (new.run_id, new.step, new.body, new.at);
            END;
            """
        )
    conn.close()


def _drop_final_snapshots(db: Path) -> int:
    """
    Make the journal look as a host that died left it: no end snapshot, the
    run's last periodic one (from the log) instead.
    """
    with sqlite3.connect(db) as conn:
        finals = [
            row[0]
            for row in conn.execute(
                "SELECT run_id FROM snapshots WHERE json_extract(body, '$.final')"
            )
        ]
        for run_id in finals:
            conn.execute("DELETE FROM snapshots WHERE run_id = ?", (run_id,))
            conn.execute(
                "INSERT INTO snapshots SELECT run_id, step, body, at FROM snapshot_log "
                "WHERE run_id = ? AND NOT json_extract(body, '$.final') ORDER BY id DESC LIMIT 1",
                (run_id,),
            )
    conn.close()
    return len(finals)


SCRIPT_ONE: list[Proposal] = [
    FAIL,
    READ,
    Round((LIST, READ)),
    ToolCall("write_file", {"path": "notes.txt", "content": "subtraction?"}),
    Round((FAIL, LIST, READ)),
    FAIL,
    Completion(),
]
SCRIPT_TWO: list[Proposal] = [LIST, Round((READ, LIST)), FIX, READ, Completion()]


def _snapshot_notes(db: Path) -> list[tuple[int, int, str | None, bool]]:
    """Every snapshot written, from the log: (id, step, round, final)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT id, step, json_extract(body, '$.round'), json_extract(body, '$.final') "
            "FROM snapshot_log ORDER BY id"
        ).fetchall()
    conn.close()
    return [(i, step, round_id, bool(final)) for i, step, round_id, final in rows]


def _keep_only(db: Path, note: int, copy: Path) -> Path:
    """A copy of the journal whose one snapshot is the logged ``note`` (the hosts died after it)."""
    shutil.copyfile(db, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("DELETE FROM snapshots")
        conn.execute(
            "INSERT INTO snapshots SELECT run_id, step, body, at FROM snapshot_log WHERE id = ?",
            (note,),
        )
    conn.close()
    return copy


@pytest.mark.parametrize("every", [2, 3])
async def test_a_resume_from_any_snapshot_inherits_what_a_full_replay_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    monkeypatch.setattr(history_module, "SNAPSHOT_EVERY", every)
    root = _project(tmp_path / "p")
    db = tmp_path / "j.db"
    task = _task(root)
    await _log_snapshots(db)
    first = await run(task, ScriptedActor(SCRIPT_ONE), db)
    assert first.disposition is not Disposition.COMPLETED
    one = await _same_either_way(db, task)
    assert one.work_items > 0
    assert one.evidence
    second = await resume(first.run_id, ScriptedActor(SCRIPT_TWO), db)
    assert second.disposition is Disposition.COMPLETED
    await _same_either_way(db, task)
    notes = _snapshot_notes(db)
    # Every `every` steps of each run before its last (that of its disposition), and at
    # each run's end.
    assert [final for *_, final in notes].count(True) == 2
    assert len(notes) == 2 + (first.steps - 1) // every + (second.steps - 1) // every
    # Some were taken in a round of parallel calls: they cover the whole round.
    assert any(round_id is not None for _, _, round_id, _ in notes)
    for note, *_ in notes:
        await _same_either_way(_keep_only(db, note, tmp_path / f"only-{note}.db"), task)


class _Reads:
    """A journal that notes whose steps were read."""

    def __init__(self, inner: JournalLike) -> None:
        self.inner = inner
        self.read: list[str] = []

    async def steps(self, run_id: str, *, after: int = 0) -> list[dict[str, Any]]:
        self.read.append(run_id)
        return await self.inner.steps(run_id, after=after)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _reads(db: Path, task: Task) -> list[str]:
    judge = Judge(task.facts(), task.policy, "d-now", contract_version=task.contract_version)
    async with open_journal(db) as j:
        reads = _Reads(j)
        await load_history(cast(JournalLike, reads), "calc-fix", "next-run", judge)
    return reads.read


async def test_a_resume_reads_only_the_steps_after_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_module, "SNAPSHOT_EVERY", 4)
    db = tmp_path / "j.db"
    task = _task(_project(tmp_path / "p"))
    await _log_snapshots(db)
    first = await run(task, ScriptedActor(SCRIPT_ONE), db)
    second = await resume(first.run_id, ScriptedActor(SCRIPT_TWO), db)
    # The last run ended: its end snapshot covers everything.
    assert await _reads(db, task) == []
    # Its host died: its periodic snapshot, and its steps after it.
    _drop_final_snapshots(db)
    assert await _reads(db, task) == [second.run_id]
    # It died before its first periodic snapshot: the first run's latest snapshot.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM snapshots WHERE run_id = ?", (second.run_id,))
    conn.close()
    assert await _reads(db, task) == [first.run_id, second.run_id]
    await _same_either_way(db, task)


async def test_a_snapshot_taken_under_another_policy_is_not_used(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    db = tmp_path / "j.db"
    task = _task(root)
    first = await run(task, ScriptedActor([FAIL, READ, Completion()]), db)
    full, replayed = await _inherited(db, task, snapshots=False)
    other = attrs.evolve(task, policy=Policy(stall_threshold=7))
    judge = Judge(other.facts(), other.policy, "d-now", contract_version=other.contract_version)
    async with open_journal(db) as j:
        assert await j.snapshot(first.run_id) is not None
        found = await load_history(j, "calc-fix", "next-run", judge)
    # Refused: the whole history is fed instead.
    assert found == full
    assert judge.work_fingerprint == replayed.work_fingerprint
    assert judge.evidence == replayed.evidence


async def test_a_snapshot_names_the_step_it_covers_and_its_round(tmp_path: Path) -> None:
    async with open_journal(tmp_path / "j.db") as j:
        await j.put_task("t", "g", {}, "c1")
        await j.create_run("r", "t", policy={}, policy_version="p", host="h")
        judge = Judge(TaskFacts(), Policy(), "d0")
        await save_snapshot(j, "r", judge, 10)
        await save_snapshot(j, "r", judge, 12, round_id="r11")
        body = await j.snapshot("r")
        # One per run: the later replaces the earlier, so the journal does not grow
        # with every snapshot a long run takes.
        assert await j.notes("r") == []
    assert body is not None
    assert (body["step"], body["round"], body["final"]) == (12, "r11", False)
    assert body["policy_version"] == judge.policy_version
    assert body["format"] == SNAPSHOT_FORMAT
    assert body["snapshot"] == as_json(judge.snapshot())


def test_a_periodic_snapshot_is_due_every_snapshot_every_steps() -> None:
    every = history_module.SNAPSHOT_EVERY
    assert not snapshot_due(every - 1, 0)
    assert snapshot_due(every, 0)
    assert not snapshot_due(2 * every - 1, every)
    assert snapshot_due(2 * every + 1, every)
