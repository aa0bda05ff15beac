"""
An agent that reads one observation, starts a child in its process group, and hangs.

It first writes an unfinished line on stdout and a note on stderr. The agent
and its child wait at most a minute, so a broken test cannot leave them behind
for long.
"""

from __future__ import annotations

import subprocess
import sys
import time

__all__ = ("main",)


def main() -> int:
    """Read one line, start a sleeping child, never answer."""
    sys.stdin.readline()
    sys.stdout.write('{"type": "action", ')
    sys.stdout.flush()
    print("agent: thinking", file=sys.stderr, flush=True)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
