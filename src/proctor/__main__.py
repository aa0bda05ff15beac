"""``python -m proctor``: the same as the ``proctor`` command."""

from proctor.cli import main

main()
