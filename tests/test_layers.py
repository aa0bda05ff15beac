"""
The package's layers, as docs/architecture.md's module tour draws them.

Every import between proctor's modules is read from the source (lazy and
type-checking imports included: a dependency is a dependency) and checked
against the table below: no cycles, imports point down the rooms, backends
never import each other, the decision core does no I/O, and the CLI sees only
public names. Modelled on trio's ``_tests/test_exports.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: Each room: the module prefixes it holds (the longest prefix wins) and the rooms
#: it may import. A room may always import itself. Keep in step with the module
#: tour in docs/architecture.md.
ROOMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "base": (
        (
            "proctor._errors",
            "proctor._channels",
            "proctor._digest",
            "proctor._logging",
            "proctor._boundary",
            "proctor._fs",
        ),
        (),
    ),
    "records": (("proctor.runtime._records", "proctor.runtime._tools.spec"), ("base",)),
    "wire": (("proctor._wire", "proctor._validators"), ("base", "records")),
    "budgets": (("proctor.budgets._",), ("base", "wire")),
    # The candidate (tree digests, path matching, freezing) sits below the tools,
    # whose fences match paths with it; the rest of the verifiers run commands
    # through the tools' sandbox.
    "candidate": (
        ("proctor.verifiers._candidate", "proctor.verifiers._index", "proctor.verifiers._watch"),
        ("base",),
    ),
    "verifiers": (("proctor.verifiers._",), ("base", "wire", "tools", "candidate")),
    "progress": (
        ("proctor.runtime._progress",),
        ("base", "records", "wire", "verifiers", "candidate"),
    ),
    "importers": (("proctor.runtime._importers",), ("base",)),
    "tools": (("proctor.runtime._tools",), ("base", "records", "wire", "candidate")),
    "effects": (
        ("proctor.runtime._effects",),
        ("base", "records", "wire", "budgets", "tools", "progress"),
    ),
    "journal": (("proctor.runtime._journal",), ("base", "records", "wire")),
    "actors": (("proctor.runtime._actors",), ("base", "records", "wire", "tools", "budgets")),
    "task": (
        ("proctor.runtime._task", "proctor.runtime._taskfile", "proctor.runtime._outcome"),
        (
            "base",
            "records",
            "wire",
            "budgets",
            "verifiers",
            "candidate",
            "progress",
            "tools",
            "effects",
            "actors",
        ),
    ),
    "operator": (
        ("proctor.runtime._operator",),
        ("base", "records", "wire", "budgets", "verifiers", "candidate", "journal", "task"),
    ),
    "control": (
        ("proctor.runtime._control",),
        (
            "base",
            "records",
            "wire",
            "budgets",
            "verifiers",
            "candidate",
            "progress",
            "tools",
            "effects",
            "journal",
            "actors",
            "task",
            "operator",
        ),
    ),
    "hosting": (
        ("proctor.runtime._hosting",),
        (
            "base",
            "records",
            "wire",
            "budgets",
            "verifiers",
            "candidate",
            "progress",
            "tools",
            "effects",
            "journal",
            "actors",
            "task",
            "operator",
            "control",
        ),
    ),
    # What people look at: a journaled run as a view, a terminal table, an HTML
    # page, OpenTelemetry spans. It reads the journal and nothing runs through it.
    "report": (("proctor.runtime._report",), ("base", "records", "wire", "budgets", "journal")),
    "public": (
        ("proctor", "proctor.runtime", "proctor.verifiers", "proctor.budgets"),
        (
            "base",
            "records",
            "wire",
            "budgets",
            "verifiers",
            "candidate",
            "progress",
            "tools",
            "effects",
            "journal",
            "actors",
            "task",
            "operator",
            "control",
            "hosting",
            "importers",
            "report",
        ),
    ),
    "cli": (("proctor.cli",), ("public",)),
    # The `proctor` command: `proctor hook` goes straight to the hooks (a hook
    # runs on every tool call of a hosted agent), every other command to the CLI.
    "entry": (("proctor._entry", "proctor.__main__"), ("base", "hosting", "cli")),
}

#: The public faces: the CLI may import these and nothing else of proctor's.
PUBLIC = ("proctor", "proctor.runtime", "proctor.verifiers", "proctor.budgets")

#: What the decision core may not import: it is pure and synchronous, so that a
#: replay decides offline exactly what a live run decided.
IMPURE = (
    "anyio",
    "asyncio",
    "aiosqlite",
    "asyncpg",
    "sqlite3",
    "subprocess",
    "socket",
    "httpx",
    "proctor.runtime._journal",
    "proctor.runtime._tools.process",
    "proctor.runtime._tools.registry",
    "proctor.runtime._effects",
)

#: Each backend's modules share its prefix (``sqlite`` and its ``sqlite_sql``, ``sqlite_io``).
BACKENDS = ("proctor.runtime._journal.sqlite", "proctor.runtime._journal.postgres")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted((SRC / "proctor").rglob("*.py"))}


def _imports(name: str) -> Iterator[tuple[str, int]]:
    """Yield every module ``name`` imports (proctor's resolved to modules), with its line."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "__future__":
                continue
            for alias in node.names:
                # ``from proctor import _channels`` imports a module, not a name.
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {}
    for name in MODULES:
        graph[name] = {t: line for t, line in _imports(name) if t in MODULES and t != name}
    return graph


GRAPH = _graph()


def _room(module: str) -> str:
    if module in PUBLIC:
        return "public"
    best, length = "", -1
    for room, (prefixes, _) in ROOMS.items():
        if room == "public":
            continue  # the public faces are exact names, not prefixes
        for prefix in prefixes:
            hit = module == prefix or module.startswith(
                prefix if prefix.endswith("_") else prefix + "."
            )
            if hit and len(prefix) > length:
                best, length = room, len(prefix)
    assert best, f"{module} is in no room: add it to ROOMS and to docs/architecture.md"
    return best


def test_every_module_is_in_a_room() -> None:
    for module in MODULES:
        _room(module)


def test_no_import_cycles() -> None:
    # Tarjan's algorithm would name every cycle; one found by depth-first search is
    # enough to fail with a path a person can follow.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def _edges() -> list[tuple[str, str, int]]:
    return [(m, t, line) for m, targets in GRAPH.items() for t, line in sorted(targets.items())]


def test_imports_point_down_the_rooms() -> None:
    wrong = []
    for module, target, line in _edges():
        source, dest = _room(module), _room(target)
        if source != dest and dest not in ROOMS[source][1]:
            wrong.append(
                f"{MODULES[module].relative_to(SRC)}:{line}: "
                f"{module} ({source}) imports {target} ({dest})"
            )
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_backends_never_import_each_other_and_only_open_knows_both() -> None:
    for module, targets in GRAPH.items():
        known = [b for b in BACKENDS if any(t.startswith(b) for t in targets)]
        in_backend = [b for b in BACKENDS if module.startswith(b)]
        for backend in in_backend:
            assert not [k for k in known if k != backend], f"{module} imports another backend"
        if len(known) > 1:
            assert module == "proctor.runtime._journal.open", f"{module} imports both backends"


def test_the_decision_core_does_no_io() -> None:
    for name in MODULES:
        if not name.startswith("proctor.runtime._progress"):
            continue
        for target, line in _imports(name):
            bad = [i for i in IMPURE if target == i or target.startswith(i + ".")]
            assert not bad, f"{MODULES[name].relative_to(SRC)}:{line}: {name} imports {target}"


def test_the_cli_imports_only_public_names() -> None:
    # The CLI is a package: its modules may import each other and the public faces.
    cli = [m for m in MODULES if m == "proctor.cli" or m.startswith("proctor.cli.")]
    assert "proctor.cli.base" in cli
    wrong = [
        f"{MODULES[module].relative_to(SRC)}:{line}: {target}"
        for module in cli
        for target, line in _imports(module)
        if target.startswith("proctor") and target not in PUBLIC and target not in cli
    ]
    assert not wrong, "the CLI imports private modules:\n" + "\n".join(wrong)
    # `python -m proctor` is the `proctor` command.
    assert {t for t, _ in _imports("proctor.__main__") if t.startswith("proctor")} == {
        "proctor._entry"
    }


#: A module longer than this is a room that holds two things: split it.
MAX_MODULE_LINES = 1200
#: A function longer than this says, in a comment starting "# Kept whole:", why it stays whole.
MAX_FUNCTION_LINES = 80


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    long = [
        f"{path.relative_to(SRC)}: {n} lines"
        for path in MODULES.values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them):\n" + "\n".join(long)


def test_a_long_function_says_why_it_stays_whole() -> None:
    unexplained = []
    for path in MODULES.values():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length <= MAX_FUNCTION_LINES:
                continue
            body = lines[node.lineno - 1 : node.end_lineno]
            if not any(line.strip().startswith("# Kept whole:") for line in body):
                unexplained.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.name}, {length}")
    assert not unexplained, (
        f"functions over {MAX_FUNCTION_LINES} lines with no '# Kept whole:' comment "
        "(split them, or say why they stay whole):\n" + "\n".join(unexplained)
    )
