"""
What a tool declares about itself: its effect class and the arguments that
identify its target. The controller, the effect ledger and the offline replay all
read these declarations; none of them needs the tool's implementation.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

__all__ = ("BUILTIN_SPECS", "Effect", "ToolSpec", "spec_for")


class Effect(enum.StrEnum):
    """
    A tool's effect class.

    ``read`` changes nothing; ``write`` changes its target and must not be sent
    twice blindly; ``idempotent_write`` may be repeated with the same arguments
    without a second effect.
    """

    READ = "read"
    WRITE = "write"
    IDEMPOTENT_WRITE = "idempotent_write"


@attrs.frozen
class ToolSpec:
    """
    A tool's declaration.

    Args:
        name: the name actors call it by.
        effect: its effect class.
        description: one paragraph for the agent.
        parameters: a JSON schema of its arguments (an object schema).
        targets: argument names that identify the target of its effect (for a
            file write, the path); the effect ledger keys uncertain effects by them.
        paths: argument names that are paths inside the workspace (confined,
            checked against protected paths).
        identity: argument names that identify the call for progress tracking;
            None means all arguments.
        changes_candidate: whether a successful call may change the candidate
            (the workspace's content).
        source: the argument naming an information source (a URL or a query),
            tracked as a source by the progress policy.
        charge: a budget dimension each call spends one of, besides ``tool_calls``
            (``fetch``: ``fetches``, ``search``: ``searches``).
    """

    name: str
    effect: Effect = Effect.READ
    description: str = ""
    parameters: dict[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    targets: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    identity: tuple[str, ...] | None = None
    changes_candidate: bool = False
    source: str | None = None
    charge: str | None = None

    @property
    def effectful(self) -> bool:
        """Whether the tool changes anything outside the controller."""
        return self.effect is not Effect.READ


def _obj(**props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


_STR: dict[str, Any] = {"type": "string"}

BUILTIN_SPECS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "read_file",
            Effect.READ,
            "Read a text file of the workspace.",
            _obj(path=_STR),
            paths=("path",),
        ),
        ToolSpec(
            "write_file",
            Effect.IDEMPOTENT_WRITE,
            "Create or replace a file of the workspace with the given content.",
            _obj(path=_STR, content=_STR),
            targets=("path",),
            paths=("path",),
            changes_candidate=True,
        ),
        ToolSpec(
            "edit_file",
            Effect.WRITE,
            "Replace the first occurrence of `old` with `new` in a file of the workspace.",
            _obj(path=_STR, old=_STR, new=_STR),
            targets=("path",),
            paths=("path",),
            changes_candidate=True,
        ),
        ToolSpec(
            "delete_file",
            Effect.IDEMPOTENT_WRITE,
            "Delete a file of the workspace.",
            _obj(path=_STR),
            targets=("path",),
            paths=("path",),
            changes_candidate=True,
        ),
        ToolSpec(
            "list_files",
            Effect.READ,
            "List the files under a directory of the workspace ('.' for all).",
            {
                "type": "object",
                "properties": {"path": _STR},
                "additionalProperties": False,
            },
            paths=("path",),
        ),
        ToolSpec(
            "run_command",
            Effect.WRITE,
            "Run a shell command in the workspace, with a time limit.",
            _obj(cmd=_STR),
            targets=("cmd",),
            changes_candidate=True,
        ),
        ToolSpec(
            "fetch",
            Effect.READ,
            "Fetch a URL (http or https, on the task's allowlist) and return its status, "
            "content type and body. A URL fetched successfully is a source a final answer "
            "may cite.",
            _obj(url=_STR),
            source="url",
            charge="fetches",
        ),
        ToolSpec(
            "search",
            Effect.READ,
            "Search for pages: returns titles, URLs and snippets.",
            _obj(query=_STR),
            source="query",
            charge="searches",
        ),
    )
}


def spec_for(name: str, extra: dict[str, ToolSpec] | None = None) -> ToolSpec:
    """
    Return the declaration of tool ``name``.

    A tool that nobody declared is a read identified by its name and arguments:
    that is how a recorded trajectory's unknown tools are treated.

    Args:
        name: the tool's name.
        extra: declarations that take precedence over the built-in ones.
    """
    if extra is not None and name in extra:
        return extra[name]
    return BUILTIN_SPECS.get(name) or ToolSpec(name)
