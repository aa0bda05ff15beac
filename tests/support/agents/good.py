"""
A well-behaved agent: reads ``calc.py``, fixes ``a - b``, asks for verification.

It reports its usage before each proposal, says what it does on stderr, and
exits with code 0 once the run has ended.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ("main",)

FIX = {"path": "calc.py", "old": "a - b", "new": "a + b"}


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    """Answer each observation with one proposal until the run ends."""
    for line in sys.stdin:
        observation = json.loads(line)
        if observation["disposition"] is not None:
            print(f"agent: the run ended: {observation['disposition']}", file=sys.stderr)
            return 0
        print(f"agent: step {observation['step']} ({observation['kind']})", file=sys.stderr)
        _send({"type": "usage", "tokens_in": 100, "tokens_out": 10, "model": "local-model"})
        outputs = [result["output"] for result in observation["results"]]
        if observation["kind"] == "start":
            _send({"type": "action", "tool": "read_file", "args": {"path": "calc.py"}})
        elif any("a - b" in output for output in outputs):
            _send({"type": "action", "tool": "edit_file", "args": FIX})
        else:
            _send({"type": "complete", "summary": "add() adds now"})
    print("agent: stdin closed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
