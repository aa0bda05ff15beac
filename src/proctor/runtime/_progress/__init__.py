"""
Progress: the decision core, its policy, normalization, distinct work, trajectories, replay.

Pure and synchronous: no journal, no event loop, no subprocess. What replay decides offline
and what the controller decides live is this same code.
"""

__all__ = ()
