"""``python -m proctor``: the same as the ``proctor`` command."""

from proctor._entry import main

main()
