"""An agent that reads one observation, complains on stderr and exits with code 3."""

from __future__ import annotations

import sys

__all__ = ("main",)


def main() -> int:
    """Read one line, fail."""
    sys.stdin.readline()
    print("agent: boom: the model key is missing", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
