"""Every public module has a tuple `__all__` of names it has; every public name is documented."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import proctor
from proctor.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _modules() -> list[ModuleType]:
    found = [proctor]
    for info in pkgutil.walk_packages(proctor.__path__, "proctor."):
        if info.name.endswith("__main__"):
            continue
        found.append(importlib.import_module(info.name))
    return found


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_all_is_a_tuple_of_real_names(module: ModuleType) -> None:
    names = getattr(module, "__all__", None)
    assert isinstance(names, tuple), f"{module.__name__} has no tuple __all__"
    assert list(names) == sorted(set(names), key=names.index), "duplicates"
    for name in names:
        assert hasattr(module, name), f"{module.__name__}.{name}"


def _public_names() -> list[str]:
    names = set(proctor.__all__)
    for package in ("runtime", "verifiers", "budgets"):
        names |= set(importlib.import_module(f"proctor.{package}").__all__)
    return sorted(names - {"__version__"})


@pytest.mark.parametrize("name", _public_names())
def test_every_public_name_is_documented(name: str) -> None:
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert re.search(rf"`{re.escape(name)}\b", reference), f"{name} is not in docs/reference.md"


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_is_documented(command: str) -> None:
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert f"proctor {command}" in reference
