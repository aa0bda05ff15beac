"""
The controller: the step loop that alone decides, journals and terminates a run.

``controller`` is the loop and its wiring of the four tasks; ``history`` is what a
resume inherits from the journal. May import every room below it: progress,
effects, tools, actors, journal, verifiers and budgets.
"""

__all__ = ()
