from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor._errors import ConfigError
from proctor.runtime._progress import policy as _policy
from proctor.runtime._progress.policy import POLICY_CODE_VERSION, Policy

_INTS = (
    "stall_threshold",
    "identical_response_threshold",
    "poll_limit",
    "failure_window",
    "rescue_limit",
)


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_policy.__all__, tuple)
    for name in _policy.__all__:
        assert hasattr(_policy, name), name
    assert Policy.__doc__
    assert isinstance(POLICY_CODE_VERSION, str)


def test_defaults() -> None:
    policy = Policy()
    assert policy.stall_threshold == 4
    assert policy.identical_response_threshold == 3
    assert policy.poll_limit == 20
    assert policy.rescue_limit == 0
    assert policy.refuse_repeats is True


def test_settings_are_plain_data() -> None:
    assert Policy().settings() == {
        "stall_threshold": 4,
        "identical_response_threshold": 3,
        "poll_limit": 20,
        "failure_window": 20,
        "rescue_limit": 0,
        "refuse_repeats": True,
    }


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize("name", _INTS)
def test_a_negative_setting_is_refused(name: str) -> None:
    settings: dict[str, Any] = {name: -1}
    with pytest.raises(ConfigError, match=rf"policy\.{name}: must be a whole number >= \d, got -1"):
        Policy(**settings)


@pytest.mark.parametrize("name", _INTS)
@pytest.mark.parametrize("value", [True, False])
def test_a_bool_for_a_number_is_refused(name: str, value: bool) -> None:
    with pytest.raises(ConfigError, match=rf"policy\.{name}: must be a whole number"):
        Policy(**{name: value})


@pytest.mark.parametrize("name", _INTS)
def test_a_float_for_a_number_is_refused(name: str) -> None:
    settings: dict[str, Any] = {name: 2.5}
    with pytest.raises(ConfigError, match=rf"policy\.{name}: must be a whole number"):
        Policy(**settings)


def test_an_identical_response_threshold_of_one_is_refused_with_the_alternatives() -> None:
    with pytest.raises(ConfigError) as info:
        Policy(identical_response_threshold=1)
    message = str(info.value)
    assert "policy.identical_response_threshold: 1 is meaningless" in message
    assert "use 0 to disable, or 2 or more" in message


@pytest.mark.parametrize("name", ["stall_threshold", "identical_response_threshold"])
def test_zero_disables_and_is_accepted(name: str) -> None:
    settings: dict[str, Any] = {name: 0}
    assert getattr(Policy(**settings), name) == 0


def test_an_identical_response_threshold_of_two_is_accepted() -> None:
    assert Policy(identical_response_threshold=2).identical_response_threshold == 2


def test_the_poll_limit_is_at_least_one() -> None:
    assert Policy(poll_limit=1).poll_limit == 1
    with pytest.raises(
        ConfigError, match=r"policy\.poll_limit: must be a whole number >= 1, got 0"
    ):
        Policy(poll_limit=0)


# -- from_mapping --------------------------------------------------------------------------


def test_from_mapping_of_nothing_is_the_default() -> None:
    assert Policy.from_mapping({}) == Policy()


def test_from_mapping_sets_what_it_names_and_leaves_the_rest() -> None:
    policy = Policy.from_mapping({"stall_threshold": 0, "refuse_repeats": False})
    assert policy == Policy(stall_threshold=0, refuse_repeats=False)


def test_from_mapping_names_an_unknown_key_and_the_known_settings() -> None:
    with pytest.raises(ConfigError) as info:
        Policy.from_mapping({"stall": 3}, where="task.toml [policy]")
    message = str(info.value)
    assert message.startswith("task.toml [policy]: policy.stall: unknown setting; known settings: ")
    for field in attrs.fields(Policy):
        assert field.name in message


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("stall_threshold", "4", "a whole number"),
        ("stall_threshold", True, "a whole number"),
        ("poll_limit", 2.0, "a whole number"),
        ("refuse_repeats", 1, "true or false"),
        ("refuse_repeats", "yes", "true or false"),
    ],
)
def test_from_mapping_refuses_the_wrong_type(key: str, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        Policy.from_mapping({key: value})
    assert str(info.value) == f"policy.{key}: must be {expected}, got {value!r}"


def test_from_mapping_says_where_a_bad_value_came_from() -> None:
    with pytest.raises(ConfigError) as info:
        Policy.from_mapping({"identical_response_threshold": 1}, where="run.toml")
    assert str(info.value).startswith(
        "run.toml: policy.identical_response_threshold: 1 is meaningless"
    )


def test_from_mapping_refuses_a_negative_value() -> None:
    with pytest.raises(
        ConfigError, match=r"^policy\.rescue_limit: must be a whole number >= 0, got -2$"
    ):
        Policy.from_mapping({"rescue_limit": -2})


# -- version --------------------------------------------------------------------------------


def test_version_has_a_stable_shape() -> None:
    assert re.fullmatch(r"p1-[0-9a-f]{12}", Policy().version)


def test_version_is_stable_for_equal_settings() -> None:
    assert Policy().version == Policy().version
    assert Policy(stall_threshold=6).version == Policy.from_mapping({"stall_threshold": 6}).version


_settings = st.fixed_dictionaries(
    {
        "stall_threshold": st.integers(0, 50),
        "identical_response_threshold": st.just(0) | st.integers(2, 50),
        "poll_limit": st.integers(1, 50),
        "rescue_limit": st.integers(0, 50),
        "refuse_repeats": st.booleans(),
    }
)


@given(first=_settings, second=_settings)
def test_version_differs_exactly_when_a_setting_differs(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    a, b = Policy(**first), Policy(**second)
    assert (a.version == b.version) == (first == second)


@pytest.mark.parametrize(
    "change",
    [
        {"stall_threshold": 5},
        {"identical_response_threshold": 0},
        {"poll_limit": 21},
        {"rescue_limit": 1},
        {"refuse_repeats": False},
    ],
)
def test_any_one_setting_changes_the_version(change: dict[str, Any]) -> None:
    assert Policy(**change).version != Policy().version


def test_the_version_covers_the_code_version(monkeypatch: pytest.MonkeyPatch) -> None:
    before = Policy().version
    monkeypatch.setattr(_policy, "POLICY_CODE_VERSION", "0.0.0")
    assert Policy().version != before
