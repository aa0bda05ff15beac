"""
Every module has a tuple `__all__` of names it has, and misses none: a public
package's public attributes are all in it (anyio's ``test_all_attributes``), and
a private module's ``__all__`` names every public class and function it defines.
Every public name is documented.
"""

from __future__ import annotations
import __future__

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


PUBLIC = ("proctor", "proctor.runtime", "proctor.verifiers", "proctor.budgets")


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_all_misses_no_public_name(module: ModuleType) -> None:
    names = set(getattr(module, "__all__", ()))
    missing = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, ModuleType | __future__._Feature):
            continue
        # A public package's namespace is its API: whatever is there is in __all__.
        # A private module's public classes and functions are what it offers its
        # neighbours: name them, or give them an underscore.
        offered = module.__name__ in PUBLIC or (
            (isinstance(value, type) or callable(value))
            and getattr(value, "__module__", None) == module.__name__
        )
        if offered and name not in names:
            missing.append(name)
    assert not missing, f"{module.__name__}.__all__ misses {', '.join(sorted(missing))}"


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
