"""
Effects: the ledger of side effects, their keys, reconciliation and the HTTP tool.

May import: records, tools, progress.normalize. Never the journal: the controller journals.
"""

__all__ = ()
