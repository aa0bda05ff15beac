"""
``proctor hook AGENT``: read one hook call on standard input, answer it.

Fail closed: whatever goes wrong (input that is not the agent's protocol, a task
file that cannot be read, a journal that cannot be opened, a bug) is answered
with exit code 2 and the reason on standard error, which every agent takes as
a refusal; never with a traceback, which they take as no opinion.
"""

from __future__ import annotations

from proctor.runtime._hosting.hooks.agents import (
    Agent,
    HookInputError,
    fail_closed,
    parse,
    render,
)

__all__ = ("hook_main",)


def hook_main(agent: Agent, task_path: str, journal: str, text: str) -> tuple[str, str, int]:
    """
    Answer one hook call.

    Args:
        agent: ``claude``, ``codex`` or ``gemini``.
        task_path: the task file.
        journal: the journal (a SQLite file or a ``postgresql://`` URL).
        text: the hook's standard input.

    Returns:
        (what to write on standard output, on standard error, the exit code)
    """
    try:
        event = parse(agent, text)
    except HookInputError as exc:
        return fail_closed(f"the {agent} hook input was not understood: {exc}")
    try:
        # The engine is imported only once the input is known to be an event.
        from proctor.runtime._hosting.hooks.session import handle_sync, load_hook_task

        task = load_hook_task(task_path, event.cwd)
        answer = handle_sync(event, task, journal)
    except Exception as exc:  # fail closed: any failure refuses, none allows
        return fail_closed(f"{event.name} could not be judged: {type(exc).__name__}: {exc}")
    return render(event, answer), "", 0
