"""Helpers shared by the tests: real services to run tools against."""

__all__ = ()
