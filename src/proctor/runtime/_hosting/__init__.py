"""
Hosting: resume, workers and the MCP gateway, each built on the controller.

May import everything below it: the controller, the journal, the task model.
"""

__all__ = ()
