"""
Small agent programs for the process actor's tests, run with ``sys.executable``.

Each speaks the JSON Lines protocol of ``docs/hosting-agents.md``, or breaks it
on purpose.
"""

__all__ = ()
