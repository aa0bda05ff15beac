"""
The controller's policy settings and their version.

A policy version is a digest of the settings and of the policy code's own
version, recorded in every trace record: a recorded run can be replayed under
another policy and the two versions compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from proctor._digest import canonical_json, digest
from proctor._errors import ConfigError

__all__ = ("POLICY_CODE_VERSION", "Policy")

#: Bumped whenever the decision code changes what it decides for some input.
POLICY_CODE_VERSION = "2026.12.2"


def _at_least(minimum: int) -> Any:
    def check(inst: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(
                f"policy.{attribute.name}: must be a whole number >= {minimum}, got {value!r}"
            )

    return check


def _identical(inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    _at_least(0)(inst, attribute, value)
    if value == 1:
        raise ConfigError(
            "policy.identical_response_threshold: 1 is meaningless (every response would be "
            "its own repetition): use 0 to disable, or 2 or more"
        )


@attrs.frozen
class Policy:
    """
    The no-progress policy's settings.

    Args:
        stall_threshold: consecutive iterations without progress that stop the run
            with ``no_progress``; also how often one failure may occur on one
            candidate. 0 disables both.
        identical_response_threshold: identical consecutive responses that stop the
            run. 0 disables; 1 is rejected.
        poll_limit: how many times in a row a declared poll may return the same
            successful outcome before it counts as an ordinary repetition.
        failure_window: how many recent iterations the same-failure count looks
            at: an occurrence older than that no longer counts. 0: all of them.
        rescue_limit: how many rescue instructions may precede a ``no_progress``
            stop while required files are still missing.
        refuse_repeats: refuse an exact repeat of a call that made no progress
            when the next step without progress would stop the run. Only a call
            that gave the same outcome every time is refused: a stateful call,
            such as a debugger's ``next``, is not.
    """

    stall_threshold: int = attrs.field(default=4, validator=_at_least(0))
    identical_response_threshold: int = attrs.field(default=3, validator=_identical)
    poll_limit: int = attrs.field(default=20, validator=_at_least(1))
    failure_window: int = attrs.field(default=20, validator=_at_least(0))
    rescue_limit: int = attrs.field(default=0, validator=_at_least(0))
    refuse_repeats: bool = True

    @property
    def version(self) -> str:
        """A short digest of the code version and the settings."""
        payload = {"code": POLICY_CODE_VERSION, "settings": self.settings()}
        return f"p1-{digest(canonical_json(payload))[:12]}"

    def settings(self) -> dict[str, Any]:
        """Return the settings as plain data."""
        return attrs.asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "") -> Policy:
        """
        Build a policy from a table of settings.

        Args:
            data: the settings; keys not named are left at their defaults.
            where: where the table came from (a file name), for error messages.

        Raises:
            ConfigError: an unknown key or a bad value.
        """
        prefix = f"{where}: " if where else ""
        known = [f.name for f in attrs.fields(cls)]
        for key in data:
            if key not in known:
                raise ConfigError(
                    f"{prefix}policy.{key}: unknown setting; known settings: {', '.join(known)}"
                )
        for key, value in data.items():
            expected = bool if key == "refuse_repeats" else int
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"{prefix}policy.{key}: must be "
                    f"{'true or false' if expected is bool else 'a whole number'}, got {value!r}"
                )
        try:
            return cls(**data)
        except ConfigError as exc:
            raise ConfigError(f"{prefix}{exc}") from None
