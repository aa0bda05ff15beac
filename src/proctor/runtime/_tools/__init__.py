"""
Tools: declarations (specs), the registry and built-ins, the workspace, processes.

May import: records, progress.normalize. Never the controller, the journal or the actors.
"""

__all__ = ()
