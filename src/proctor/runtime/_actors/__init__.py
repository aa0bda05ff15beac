"""
Actors: the agents a run hosts (scripted, function, OpenAI-compatible, external process).

May import: records, tools (specs and the registry, for tool schemas), budgets' usage,
the wire converter. Never the controller or the journal.
"""

__all__ = ()
