"""
The ``proctor`` command's entry point: ``proctor hook ...`` is answered without
importing the CLI (click, rich) or the runtime when a hook server is running
(``proctor hooks serve``), and with only the runtime when none is; every other
command goes to :mod:`proctor.cli`.
"""

from __future__ import annotations

import sys

__all__ = ("main",)

_USAGE = "usage: proctor hook claude|codex|gemini --task TASK.toml [--journal F]"


def _hook(argv: list[str]) -> int:
    import os

    from proctor.runtime._hosting.hooks.client import ServerLost, ask, socket_file

    agent, task, journal = None, None, os.environ.get("PROCTOR_JOURNAL", "proctor.db")
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--task", "--journal") and rest:
            value = rest.pop(0)
            task, journal = (value, journal) if arg == "--task" else (task, value)
        elif arg.startswith(("--task=", "--journal=")):
            key, value = arg.split("=", 1)
            task, journal = (value, journal) if key == "--task" else (task, value)
        elif agent is None and not arg.startswith("-"):
            agent = arg
        else:
            return -1  # anything else (--help, a typo): click says what is wrong
    if agent not in ("claude", "codex", "gemini") or task is None:
        return -1
    # Bytes that are not UTF-8 must not crash the hook (a crash lets the call through).
    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    request = {"agent": agent, "task": os.path.abspath(task), "journal": journal, "text": text}
    try:
        where = os.environ.get("PROCTOR_HOOK_SOCKET")
        answer = ask(where or socket_file(journal), request)
    except ServerLost as exc:
        # It may have acted on the call: refuse rather than decide a second time.
        sys.stderr.write(f"proctor: {exc}\n")
        return 2
    if answer is None:
        import logging

        import structlog

        from proctor._logging import stderr_logger
        from proctor.runtime._hosting.hooks.command import hook_main

        # Standard output is the agent's: logs go to standard error, warnings only.
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=stderr_logger,
        )

        out, err, code = hook_main(agent, task, journal, text)  # type: ignore[arg-type]
    else:
        out, err, code = str(answer.get("out", "")), str(answer.get("err", "")), answer["code"]
    if out:
        sys.stdout.write(out + "\n")
    if err:
        sys.stderr.write(err)
    return code


def _hook_or_refuse(argv: list[str]) -> int:
    """
    :func:`_hook`, failing closed on anything unexpected: an agent takes a crashed
    hook (a traceback, exit 1) as no opinion and runs the call; exit 2 refuses it.
    """
    try:
        return _hook(argv)
    except Exception as exc:
        sys.stderr.write(f"proctor: the hook failed, so the call is refused: {exc!r}\n")
        return 2


def main() -> None:
    """Run the ``proctor`` command."""
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        code = _hook_or_refuse(argv[1:])
        if code >= 0:
            sys.stdout.flush()
            raise SystemExit(code)
    from proctor.cli import main as cli

    cli()
