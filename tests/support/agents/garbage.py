"""
An agent that answers its first observation with a line that is not a proposal.

The line is its first argument (default: some prose). It then waits for more
input instead of exiting, so only the garbage can be blamed.
"""

from __future__ import annotations

import sys

__all__ = ("main",)


def main() -> int:
    """Read one line, write the garbage, wait for stdin to close."""
    sys.stdin.readline()
    garbage = sys.argv[1] if len(sys.argv) > 1 else "Sure! I will now read calc.py."
    sys.stdout.write(garbage + "\n")
    sys.stdout.flush()
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
