"""
Run the answer example: start the local site, run both task files with
``proctor run``, stop the site.

    python examples/answer/run.py

``cycle.toml``'s agent fetches the same pages in a cycle and is stopped
``no_progress``; ``grounded.toml``'s agent fetches a page and cites it, and its
answer completes. Each run prints its handoff, the sources included.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from server import serve  # noqa: E402


def main() -> int:
    server = serve(8765)
    proctor = shutil.which("proctor", path=str(Path(sys.executable).parent)) or "proctor"
    codes = []
    try:
        for name in ("cycle.toml", "grounded.toml"):
            print(f"\n$ proctor run examples/answer/{name}", flush=True)
            codes.append(subprocess.run([proctor, "run", str(HERE / name)]).returncode)
    finally:
        server.shutdown()
    # no_progress is exit code 14, completed 0: the example ends as it should.
    return 0 if codes == [14, 0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
