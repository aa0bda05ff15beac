"""The library never writes to stdout: its logs go to stderr unless the application says."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PY = sys.executable


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )


def test_the_library_logs_to_stderr_never_stdout() -> None:
    done = _run(
        """
        import structlog
        import proctor
        proctor.Task  # any public name: proctor's modules are imported on first use
        structlog.get_logger().info("library.event", n=1)
        structlog.get_logger().warning("library.warning")
        """
    )
    assert done.stdout == ""
    assert "library.event" in done.stderr
    assert "library.warning" in done.stderr


def test_an_application_s_own_configuration_is_left_alone() -> None:
    done = _run(
        """
        import sys, structlog
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stdout))
        import proctor
        proctor.Task
        structlog.get_logger().info("app.event")
        """
    )
    assert "app.event" in done.stdout
    assert done.stderr == ""


def test_a_swapped_stderr_receives_the_logs() -> None:
    # Resolved at each call, not bound once: a test runner's capture or a caller's
    # redirection gets them, and a stream closed since is never written to.
    done = _run(
        """
        import io, sys, structlog
        from proctor.runtime import open_journal
        saved, sys.stderr = sys.stderr, io.StringIO()
        structlog.get_logger().info("captured.event")
        captured, sys.stderr = sys.stderr.getvalue(), saved
        print("captured" if "captured.event" in captured else "lost")
        """
    )
    assert done.stdout == "captured\n"


def test_every_module_that_logs_sends_structlog_to_stderr_first() -> None:
    # A module imported on its own (not through a public name) configures too.
    done = _run(
        """
        import structlog
        import proctor.runtime._tools.process
        structlog.get_logger().warning("module.event")
        """
    )
    assert done.stdout == ""
    assert "module.event" in done.stderr


def test_a_hook_call_answered_by_a_server_imports_no_logging() -> None:
    # `proctor hook` runs on every tool call of a hosted agent: answered by a
    # hook server, it loads the standard library and two small modules only.
    done = _run(
        """
        import sys
        import proctor._entry
        from proctor.runtime._hosting.hooks import client
        heavy = [m for m in ("structlog", "rich", "click", "anyio", "attrs") if m in sys.modules]
        print(heavy)
        """
    )
    assert done.stdout == "[]\n"
