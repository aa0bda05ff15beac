"""
Hosting agents that run their own tools (Claude Code, Codex CLI, gemini-cli)
through their hooks: ``agents`` (their protocols), ``mapping`` (their tool
calls as proposals), ``spend`` (their transcripts' usage), ``session`` (one
run per session, one hook call at a time, decided by the controller),
``command`` (``proctor hook``) and ``install`` (their settings files).
"""

__all__ = ()
