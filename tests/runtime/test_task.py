from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from proctor._errors import ConfigError
from proctor.budgets._budget import DIMENSIONS, Budget
from proctor.budgets._prices import Price, PriceTable
from proctor.runtime import _task
from proctor.runtime._progress.policy import Policy
from proctor.runtime._task import (
    LIVE_RESCUE_LIMIT,
    ActorSpec,
    Approval,
    Task,
    TaskFile,
    load_task,
    parse_task,
    prepare_workspace,
)
from proctor.verifiers._candidate import DEFAULT_IGNORE
from proctor.verifiers._checks import CommandCheck

TASK = """\
[task]
goal = "Make the test suite pass without changing tests/"
workspace = "project"
kind = "build"
id = "rescue-1"
command_time_limit = 30
ignore = ["build/"]

[[checks]]
name = "tests"
run = ["pytest", "-q"]
time_limit = 300

[[checks]]
name = "lint"
run = "ruff check ."
expect_exit = 0
required = false

[contract]
protected = ["tests/**", "./checks//run.sh"]
required_files = ["src/app.py"]

[budget]
steps = 60
wall_seconds = 900
"tool_calls:run_command" = 20
reserve = { steps = 3 }

[policy]
stall_threshold = 6
identical_response_threshold = 0

[actor]
kind = "scripted"
script = "agent.jsonl"
temperature = 0
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A directory holding a task file's workspace and script."""
    (tmp_path / "project").mkdir()
    (tmp_path / "agent.jsonl").write_text('{"type": "complete"}\n')
    return tmp_path


def write(home: Path, text: str) -> Path:
    path = home / "task.toml"
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """The 1-based number of the line that starts with ``needle`` (its nth occurrence)."""
    hits = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(needle)]
    return hits[occurrence - 1]


def config_error(home: Path, text: str) -> tuple[Path, str]:
    path = write(home, text)
    with pytest.raises(ConfigError) as info:
        load_task(path)
    return path, str(info.value)


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_task.__all__, tuple)
    for name in _task.__all__:
        assert getattr(_task, name).__doc__, name


# -- a valid file -----------------------------------------------------------------------


def test_a_valid_file_loads_with_its_values(home: Path) -> None:
    path = write(home, TASK)
    loaded = load_task(path)
    assert isinstance(loaded, TaskFile)
    assert loaded.path == path
    task = loaded.task
    assert task.goal == "Make the test suite pass without changing tests/"
    assert task.workspace == (home / "project").resolve()
    assert task.kind == "build"
    assert task.task_id == "rescue-1"
    assert task.command_time_limit == 30.0
    assert isinstance(task.command_time_limit, float)
    assert task.ignore == (*DEFAULT_IGNORE, "build/")
    assert task.checks == (
        CommandCheck("tests", ("pytest", "-q"), time_limit=300),
        CommandCheck("lint", "ruff check .", required=False),
    )
    assert task.protected == ("tests/**", "checks/run.sh")
    assert task.required_files == ("src/app.py",)
    assert task.budget == Budget(
        {"steps": 60, "wall_seconds": 900, "tool_calls:run_command": 20}, {"steps": 3}
    )
    # The file names required files and sets no rescue_limit: a live run rescues once.
    assert task.policy == Policy(
        stall_threshold=6, identical_response_threshold=0, rescue_limit=LIVE_RESCUE_LIMIT
    )
    assert task.template is None
    assert loaded.actor == ActorSpec(
        "scripted", (home / "agent.jsonl").resolve(), {"temperature": 0}
    )


def test_paths_are_relative_to_the_file_not_the_working_directory(
    home: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(home, TASK)
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    loaded = load_task(os.path.relpath(path))
    assert loaded.task.workspace == (home / "project").resolve()
    assert loaded.actor.script == (home / "agent.jsonl").resolve()


def test_a_minimal_file_takes_the_defaults(home: Path) -> None:
    text = '[task]\ngoal = "answer it"\nkind = "answer"\n\n[actor]\nscript = "agent.jsonl"\n'
    task = load_task(write(home, text)).task
    assert task.workspace == home.resolve()
    assert task.checks == ()
    # No [budget]: the documented default limits, never an unbounded run.
    assert task.budget == Budget({"steps": 1000, "wall_seconds": 3600})
    assert task.budget.limits == _task.DEFAULT_BUDGET_LIMITS
    assert task.policy == Policy()
    assert task.command_time_limit == 120.0
    assert task.ignore == DEFAULT_IGNORE
    assert task.task_id is None


def test_parse_task_without_a_path_names_a_placeholder(home: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_task('[task]\nkind = "answer"\n')
    assert str(info.value) == (
        "<task>:1: task.goal: required: a non-empty string saying what to achieve"
    )


def test_load_task_names_a_file_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="cannot read the task file") as info:
        load_task(path)
    assert str(info.value).startswith(f"{path}: ")


# -- malformed files ----------------------------------------------------------------------


def test_missing_goal(home: Path) -> None:
    text = TASK.replace('goal = "Make', 'title = "Make')
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'title')}: task.title: unknown key; accepted: "
        "goal, workspace, kind, id, command_time_limit, ignore, template, answer_wait"
    )
    # An absent key is located at its table's header.
    text = re.sub(r'goal = ".*"\n', "", TASK)
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[task]')}: task.goal: "
        "required: a non-empty string saying what to achieve"
    )


def test_blank_goal(home: Path) -> None:
    text = re.sub(r'goal = ".*"', 'goal = "   "', TASK)
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:{line_of(text, 'goal')}: task.goal: required")


def test_unknown_top_level_table_names_its_line(home: Path) -> None:
    text = TASK + "\n[extras]\nanswer = 42\n"
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[extras]')}: extras: unknown key; "
        "accepted: task, checks, contract, budget, policy, actor, prices, limits, approve, "
        "sandbox, fetch, search, tools"
    )


def test_unknown_top_level_key_names_its_line(home: Path) -> None:
    text = "version = 2\n" + TASK
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:1: version: unknown key; accepted: task, checks")


def test_unknown_key_in_task(home: Path) -> None:
    text = TASK.replace('kind = "build"', 'kind = "build"\nmodel = "big"')
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'model')}: task.model: unknown key; accepted: "
        "goal, workspace, kind, id, command_time_limit, ignore, template, answer_wait"
    )


def test_bad_kind(home: Path) -> None:
    text = TASK.replace('kind = "build"', 'kind = "essay"')
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'kind')}: task.kind: must be 'build' or 'answer', got 'essay'"
    )


def test_workspace_that_does_not_exist(home: Path) -> None:
    text = TASK.replace('workspace = "project"', 'workspace = "nowhere"')
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'workspace')}: task.workspace: "
        f"{(home / 'nowhere').resolve()} is not a directory"
    )


def test_workspace_that_is_a_file(home: Path) -> None:
    (home / "file").write_text("")
    text = TASK.replace('workspace = "project"', 'workspace = "file"')
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:{line_of(text, 'workspace')}: task.workspace: ")
    assert "is not a directory" in message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("command_time_limit", "0", "must be a number of seconds > 0, got 0"),
        ("command_time_limit", "true", "must be a number of seconds > 0, got True"),
        ("ignore", '"build/"', "must be a list of strings, got 'build/'"),
        ("id", '""', "must be a non-empty string"),
        ("workspace", "3", "must be a path string"),
        ("template", '"nowhere"', "is not a directory"),
    ],
)
def test_bad_values_in_task(home: Path, key: str, value: str, expected: str) -> None:
    text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", TASK)
    if f"{key} = {value}" not in text:
        text = text.replace('kind = "build"', f'kind = "build"\n{key} = {value}')
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:{line_of(text, key + ' =')}: task.{key}: ")
    assert expected in message


def test_task_that_is_not_a_table(home: Path) -> None:
    path, message = config_error(home, 'task = "fix it"\n')
    assert message == f"{path}:1: task: must be a table"


def test_a_build_task_with_no_checks(home: Path) -> None:
    text = TASK.split("[[checks]]")[0] + "[contract]" + TASK.split("[contract]")[1]
    path, message = config_error(home, text)
    assert message == (
        f"{path}: checks: a build task needs at least one required check that is not a "
        "judge: only checks can complete a build"
    )


def test_a_build_task_with_only_optional_checks(home: Path) -> None:
    text = TASK.replace("time_limit = 300", "time_limit = 300\nrequired = false")
    _, message = config_error(home, text)
    assert "checks: a build task needs at least one required check" in message


def test_an_answer_task_needs_no_checks(home: Path) -> None:
    text = TASK.split("[[checks]]")[0].replace('"build"', '"answer"') + (
        '[actor]\nscript = "agent.jsonl"\n'
    )
    assert load_task(write(home, text)).task.kind == "answer"


def test_a_check_without_run(home: Path) -> None:
    text = TASK.replace('run = ["pytest", "-q"]\n', "")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[[checks]]')}: checks[1]: "
        "needs name and either run (a command: string or list) or files "
        "(path patterns that must exist)"
    )


def test_a_second_check_without_run_names_its_own_line(home: Path) -> None:
    text = TASK.replace('run = "ruff check ."\n', "")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[[checks]]', 2)}: checks[2]: "
        "needs name and either run (a command: string or list) or files "
        "(path patterns that must exist)"
    )


def test_a_check_with_an_unknown_key(home: Path) -> None:
    text = TASK.replace("time_limit = 300", "timeout = 300")
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:{line_of(text, 'timeout')}: checks[1].timeout: ")
    assert "accepted: name, run, expect_exit, time_limit, required, junit" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("time_limit = 300", "time_limit = -1"),
            "checks[1].time_limit: check 'tests': "
            "'time_limit' must be a positive number of seconds, not -1",
        ),
        (
            ('run = ["pytest", "-q"]', "run = []"),
            "checks[1].run: check 'tests': "
            "'run' must be a shell string or a non-empty list of strings (argv), not ()",
        ),
        (
            ('run = ["pytest", "-q"]', 'run = "  "'),
            "checks[1].run: check 'tests': 'run' is an empty shell command",
        ),
        (
            ("time_limit = 300", 'time_limit = 300\nexpect_exit = "0"'),
            "checks[1].expect_exit: check 'tests': 'expect_exit' must be an exit code "
            "from 0 to 255, not '0'",
        ),
        (
            ("time_limit = 300", "time_limit = 300\nexpect_exit = true"),
            "checks[1].expect_exit: check 'tests': 'expect_exit' must be an exit code "
            "from 0 to 255, not True",
        ),
        (
            ("required = false", "required = false\ntime_limit = 0"),
            "checks[2].time_limit: check 'lint': "
            "'time_limit' must be a positive number of seconds, not 0",
        ),
    ],
)
def test_a_check_with_a_bad_value(home: Path, change: tuple[str, str], expected: str) -> None:
    # The error points at the bad key's own line, in its own check.
    text = TASK.replace(*change)
    path, message = config_error(home, text)
    assert message == f"{path}:{line_of(text, change[1].splitlines()[-1])}: {expected}"


def test_a_check_named_like_a_key_names_the_bad_field(home: Path) -> None:
    text = TASK.replace('name = "tests"', 'name = "run"').replace(
        "time_limit = 300", "time_limit = -1"
    )
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'time_limit = -1')}: checks[1].time_limit: check 'run': "
        "'time_limit' must be a positive number of seconds, not -1"
    )


def test_duplicate_check_names(home: Path) -> None:
    text = TASK.replace('name = "lint"', 'name = "tests"')
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[[checks]]')}: checks: check names must be unique, "
        "got ['tests', 'tests']"
    )


def test_checks_that_are_not_an_array_of_tables(home: Path) -> None:
    text = 'checks = "pytest"\n' + TASK.split("[[checks]]")[0] + "[actor]\nscript = 'agent.jsonl'\n"
    path, message = config_error(home, text)
    assert message == f"{path}:1: checks: must be an array of tables: [[checks]]"


def test_bad_budget_dimension(home: Path) -> None:
    text = TASK.replace("wall_seconds = 900", "wall_time = 900")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'wall_time')}: budget.wall_time: unknown dimension 'wall_time'; "
        f"known: {', '.join(DIMENSIONS)}, or tool_calls:TOOL for one tool"
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("steps = 60", "steps = -60"), "budget.steps"),
        (
            ('"tool_calls:run_command" = 20', '"tool_calls:run_command" = -2'),
            "budget.tool_calls:run_command",
        ),
    ],
)
def test_negative_budget_limit(home: Path, change: tuple[str, str], field: str) -> None:
    text = TASK.replace(*change)
    path, message = config_error(home, text)
    line, got = line_of(text, change[1]), change[1].split(" = ")[1]
    assert message == f"{path}:{line}: {field}: must be a number >= 0, got {got}"


@pytest.mark.parametrize(
    ("reserve", "expected"),
    [
        ("{ steps = 61 }", "budget.reserve.steps: 61 is larger than the limit 60"),
        ("{ steps = -1 }", "budget.reserve.steps: must be a number >= 0, got -1"),
        (
            '{ "tool_calls:run_command" = 30 }',
            "budget.reserve.tool_calls:run_command: 30 is larger than the limit 20",
        ),
        (
            "{ retries = 1 }",
            "budget.reserve.retries: a reserve needs a limit on retries to be carved from",
        ),
    ],
)
def test_a_bad_reserve_names_its_field(home: Path, reserve: str, expected: str) -> None:
    text = TASK.replace("reserve = { steps = 3 }", f"reserve = {reserve}")
    path, message = config_error(home, text)
    assert message == f"{path}:{line_of(text, 'reserve')}: {expected}"


@pytest.mark.parametrize(
    "change",
    [
        ("reserve = { steps = 3 }\n", "\n[budget.reserve]\nsteps = 61\n"),
        ("reserve = { steps = 3 }", "reserve.steps = 61"),
    ],
    ids=["sub-table", "dotted-key"],
)
def test_a_reserve_in_another_toml_form_names_its_line(home: Path, change: tuple[str, str]) -> None:
    text = TASK.replace(*change)
    path, message = config_error(home, text)
    line = line_of(text, change[1].splitlines()[-1])
    assert message == f"{path}:{line}: budget.reserve.steps: 61 is larger than the limit 60"


def test_reserve_that_is_not_a_table(home: Path) -> None:
    text = TASK.replace("reserve = { steps = 3 }", "reserve = 3")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'reserve')}: budget.reserve: must be a table, e.g. {{ steps = 3 }}"
    )


def test_unknown_policy_key(home: Path) -> None:
    text = TASK.replace("stall_threshold = 6", "stall = 6")
    path, message = config_error(home, text)
    known = ", ".join(f.name for f in attrs.fields(Policy))
    assert message == (
        f"{path}:{line_of(text, 'stall =')}: policy.stall: unknown setting; known settings: {known}"
    )


def test_a_policy_setting_of_the_wrong_type_names_its_line(home: Path) -> None:
    text = TASK.replace("stall_threshold = 6", "stall_threshold = true")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'stall_threshold')}: policy.stall_threshold: "
        "must be a whole number, got True"
    )


BAD_POLICY_VALUES = pytest.mark.parametrize(
    ("change", "field", "complaint"),
    [
        (
            ("identical_response_threshold = 0", "identical_response_threshold = 1"),
            "policy.identical_response_threshold",
            "1 is meaningless (every response would be its own repetition): "
            "use 0 to disable, or 2 or more",
        ),
        (
            ("stall_threshold = 6", "stall_threshold = -1"),
            "policy.stall_threshold",
            "must be a whole number >= 0, got -1",
        ),
    ],
    ids=["identical_response_threshold", "stall_threshold"],
)


@BAD_POLICY_VALUES
def test_a_bad_policy_value_names_its_line_and_field(
    home: Path, change: tuple[str, str], field: str, complaint: str
) -> None:
    text = TASK.replace(*change)
    path, message = config_error(home, text)
    assert message.startswith(f"{path}:{line_of(text, change[1])}: {field}: ")
    assert message.endswith(f": {complaint}")


@BAD_POLICY_VALUES
def test_a_bad_policy_value_names_its_field_once(
    home: Path, change: tuple[str, str], field: str, complaint: str
) -> None:
    text = TASK.replace(*change)
    path, message = config_error(home, text)
    assert message == f"{path}:{line_of(text, change[1])}: {field}: {complaint}"


def test_unknown_actor_kind_names_its_own_line(home: Path) -> None:
    # [task] has a kind too: the error points at the one in [actor].
    text = TASK.replace('kind = "scripted"', 'kind = "llm"')
    path, message = config_error(home, text)
    line = line_of(text, 'kind = "llm"')
    assert message == (
        f"{path}:{line}: actor.kind: unknown actor kind 'llm'; accepted: scripted, openai, process"
    )


def test_missing_script(home: Path) -> None:
    text = TASK.replace('script = "agent.jsonl"\n', "")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, '[actor]')}: actor.script: "
        'a scripted actor needs script = "FILE.jsonl"'
    )


def test_script_that_does_not_exist(home: Path) -> None:
    text = TASK.replace("agent.jsonl", "gone.jsonl")
    path, message = config_error(home, text)
    assert message == (
        f"{path}:{line_of(text, 'script')}: actor.script: "
        f"{(home / 'gone.jsonl').resolve()} does not exist"
    )


def test_no_actor_table(home: Path) -> None:
    path, message = config_error(home, TASK.split("[actor]")[0])
    assert message == f'{path}: actor.script: a scripted actor needs script = "FILE.jsonl"'


def test_invalid_toml(home: Path) -> None:
    text = TASK.replace('kind = "build"', 'kind = "build')
    path, message = config_error(home, text)
    assert message.startswith(f"{path}: not valid TOML: ")
    assert f"line {line_of(text, 'kind')}" in message


# -- Task -------------------------------------------------------------------------------


def test_task_resolves_and_normalizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    task = Task(
        goal="g",
        workspace="ws",
        checks=[CommandCheck("t", ["true"])],
        protected=["tests//a.py", "./b"],
        required_files=["out/"],
    )
    assert task.workspace == tmp_path.resolve() / "ws"
    assert task.checks == (CommandCheck("t", ("true",)),)
    assert task.protected == ("tests/a.py", "b")
    assert task.required_files == ("out",)


def test_facts_carry_only_required_checks(tmp_path: Path) -> None:
    task = Task(
        goal="g",
        workspace=tmp_path,
        checks=(CommandCheck("a", "true"), CommandCheck("b", "true", required=False)),
        protected=("tests/**",),
    )
    facts = task.facts()
    assert facts.kind == "build"
    # Protected paths imply the scope check, which is required.
    assert facts.checks == ("a", "scope")
    assert facts.protected == ("tests/**",)


def test_describe_is_plain_data(tmp_path: Path) -> None:
    task = Task(goal="g", workspace=tmp_path, kind="answer", budget=Budget.of(steps=5))
    described = task.describe()
    assert described["goal"] == "g"
    assert described["workspace"] == str(tmp_path.resolve())
    assert described["budget"] == {"limits": {"steps": 5.0}, "reserve": {}}
    assert described["policy"] == Policy().settings()
    assert described["contract"] == task.contract()


def test_a_described_task_keeps_its_prices(tmp_path: Path) -> None:
    prices = PriceTable.empty().with_prices({"house-model": Price(0.5, 1.5)})
    task = Task(goal="g", workspace=tmp_path, kind="answer", prices=prices)
    again = Task.from_description(json.loads(json.dumps(task.describe())))
    # Exactly the table the run charged with: nothing of the built-in one comes back.
    assert again.prices == prices
    assert again.prices.cost("house-model", 1_000_000, 1_000_000) == 2.0
    assert "gpt-4o" not in again.prices
    # A description written before prices were journaled gets the built-in table.
    older = {k: v for k, v in task.describe().items() if k != "prices"}
    assert Task.from_description(older).prices == PriceTable()


def _base(tmp_path: Path) -> Task:
    return Task(
        goal="Fix the build",
        workspace=tmp_path,
        checks=(CommandCheck("tests", ("pytest", "-q")),),
        protected=("tests/**",),
        required_files=("app.py",),
        budget=Budget.of(steps=10),
    )


@pytest.mark.parametrize(
    "change",
    [
        {"checks": (CommandCheck("tests", ("pytest", "-x")),)},
        {"checks": (CommandCheck("unit", ("pytest", "-q")),)},
        {"checks": (CommandCheck("tests", ("pytest", "-q"), expect_exit=1),)},
        {
            "checks": (
                CommandCheck("tests", ("pytest", "-q")),
                CommandCheck("x", "y", required=False),
            )
        },
        {"checks": (CommandCheck("tests", ("pytest", "-q")), CommandCheck("lint", "ruff"))},
        {"checks": (CommandCheck("tests", ("pytest", "-q"), time_limit=5),)},
        {"protected": ("tests/**", "conftest.py")},
        {"protected": ()},
        {"required_files": ()},
        {"kind": "answer"},
    ],
)
def test_contract_version_changes_with_the_contract(tmp_path: Path, change: dict[str, Any]) -> None:
    base = _base(tmp_path)
    assert attrs.evolve(base, **change).contract_version != base.contract_version


@pytest.mark.parametrize(
    "change",
    [
        {"goal": "Something else entirely"},
        {"budget": Budget.of(reserve={"steps": 5}, steps=100, wall_seconds=60)},
        {"policy": Policy(stall_threshold=9)},
        {"command_time_limit": 5.0},
        {"task_id": "other"},
        {"ignore": ("dist",)},
    ],
)
def test_contract_version_ignores_what_does_not_decide_success(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    base = _base(tmp_path)
    assert attrs.evolve(base, **change).contract_version == base.contract_version


def test_contract_version_is_stable(tmp_path: Path) -> None:
    assert _base(tmp_path).contract_version == _base(tmp_path).contract_version
    # The workspace is where the work happens, not what decides success.
    other = tmp_path / "other"
    other.mkdir()
    assert attrs.evolve(_base(tmp_path), workspace=other).contract_version == (
        _base(tmp_path).contract_version
    )


def test_contract_version_of_a_loaded_file_matches_the_same_task_in_python(home: Path) -> None:
    loaded = load_task(write(home, TASK)).task
    built = Task(
        goal="anything",
        workspace=home,
        checks=loaded.checks,
        protected=("tests/**", "checks/run.sh"),
        required_files=("src/app.py",),
    )
    assert built.contract_version == loaded.contract_version


# -- prepare_workspace --------------------------------------------------------------------


@pytest.fixture
def template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (root / "README").write_text("read me\n")
    (root / "link").symlink_to("README")
    return root


def test_prepare_workspace_lays_the_workspace_from_the_template(
    tmp_path: Path, template: Path
) -> None:
    task = Task(goal="g", workspace=tmp_path / "ws", kind="answer", template=template)
    prepare_workspace(task)
    ws = tmp_path / "ws"
    assert (ws / "src" / "app.py").read_text() == "x = 1\n"
    assert (ws / "README").read_text() == "read me\n"
    assert (ws / "link").is_symlink()
    assert os.readlink(ws / "link") == "README"
    # The template is left alone.
    assert sorted(p.name for p in template.iterdir()) == ["README", "link", "src"]


def test_prepare_workspace_replaces_what_it_laid(tmp_path: Path, template: Path) -> None:
    task = Task(goal="g", workspace=tmp_path / "ws", kind="answer", template=template)
    prepare_workspace(task)
    ws = tmp_path / "ws"
    (ws / "scratch.txt").write_text("left over")
    (ws / "src" / "app.py").write_text("x = 2\n")
    (ws / "README").unlink()
    prepare_workspace(task)
    assert not (ws / "scratch.txt").exists()
    assert (ws / "src" / "app.py").read_text() == "x = 1\n"
    assert (ws / "README").read_text() == "read me\n"


def test_prepare_workspace_refuses_a_directory_it_did_not_lay(
    tmp_path: Path, template: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "precious.txt").write_text("mine")
    task = Task(goal="g", workspace=ws, kind="answer", template=template)
    with pytest.raises(ConfigError) as info:
        prepare_workspace(task)
    message = str(info.value)
    assert message.startswith(f"{ws.resolve()} exists and was not laid from a template")
    assert "drop task.template" in message
    assert (ws / "precious.txt").read_text() == "mine"
    assert not (ws / "src").exists()


def test_prepare_workspace_without_a_template_leaves_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("kept")
    prepare_workspace(Task(goal="g", workspace=tmp_path, kind="answer"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_task_file_with_a_template_needs_no_workspace_yet(home: Path, template: Path) -> None:
    text = TASK.replace('workspace = "project"', 'workspace = "fresh"\ntemplate = "template"')
    task = load_task(write(home, text)).task
    assert task.template == template.resolve()
    assert not task.workspace.exists()
    prepare_workspace(task)
    assert (task.workspace / "src" / "app.py").read_text() == "x = 1\n"


# -- people in the loop ------------------------------------------------------------------


def test_approvals_and_the_answer_wait_load_and_round_trip(home: Path) -> None:
    text = TASK.replace('ignore = ["build/"]', 'ignore = ["build/"]\nanswer_wait = 90') + (
        '\n[approve]\nwait_seconds = 30\nrun_command = ["git push*"]\ndelete_file = ["src/**"]\n'
    )
    task = load_task(write(home, text)).task
    assert task.answer_wait == 90.0
    assert task.approval_wait == 30.0
    assert [(a.tool, a.patterns) for a in task.approvals] == [
        ("run_command", ("git push*",)),
        ("delete_file", ("src/**",)),
    ]
    again = Task.from_description(task.describe())
    assert (again.answer_wait, again.approvals, again.approval_wait) == (
        task.answer_wait,
        task.approvals,
        task.approval_wait,
    )


def test_approval_patterns_match_the_calls_target() -> None:
    push = Approval("run_command", ("git push*",))
    assert push.matches("run_command", "git push origin main")
    assert not push.matches("run_command", "git status")
    assert not push.matches("write_file", "git push")
    assert not push.matches("run_command", None)
    src = Approval("delete_file", ("src/**",))
    assert src.matches("delete_file", "src/app/main.py")
    assert src.matches("delete_file", "./src/x.py")
    assert not src.matches("delete_file", "docs/x.md")
    assert Approval("http").matches("http", None)


@pytest.mark.parametrize(
    ("table", "field", "says"),
    [
        ('run_command = "git push*"', "approve.run_command", "must be a list of strings"),
        ("run_command = []", "approve.run_command", "non-empty glob patterns"),
        ('run_command = [""]', "approve.run_command", "non-empty glob patterns"),
        ("wait_seconds = -1", "approve.wait_seconds", "seconds >= 0"),
        # Refused at the boundary, before the table is read: no number there is infinite.
        ("wait_seconds = inf", "approve.wait_seconds", "inf is not a finite number"),
    ],
)
def test_a_bad_approve_table_names_its_field(home: Path, table: str, field: str, says: str) -> None:
    _, message = config_error(home, TASK + f"\n[approve]\n{table}\n")
    assert f": {field}: " in message
    assert says in message


@pytest.mark.parametrize("value", ["-5", "nan", "true", '"soon"'])
def test_a_bad_answer_wait_is_refused(home: Path, value: str) -> None:
    text = TASK.replace('ignore = ["build/"]', f'ignore = ["build/"]\nanswer_wait = {value}')
    _, message = config_error(home, text)
    if value == "nan":
        # Refused at the boundary, before the table is read: no number there is NaN.
        assert "task.answer_wait: nan is not a finite number" in message
    else:
        assert "task.answer_wait: must be a number of seconds >= 0" in message
