from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proctor.runtime._progress import workset as _workset
from proctor.runtime._progress.workset import WorkSet, naive_fingerprint

Item = tuple[str, ...]

_parts = st.text(alphabet="abcé\u0301 :", max_size=4)
_items = st.lists(_parts, min_size=1, max_size=3).map(tuple)
_item_lists = st.lists(_items, max_size=12)


def _filled(items: list[Item]) -> WorkSet:
    work = WorkSet()
    for item in items:
        work.add(*item)
    return work


def test_all_names_exist_and_are_documented() -> None:
    assert isinstance(_workset.__all__, tuple)
    for name in _workset.__all__:
        assert getattr(_workset, name).__doc__, name


def test_add_reports_new_items() -> None:
    work = WorkSet()
    assert work.add("command", "pytest -q", "1") is True
    assert work.add("command", "pytest -q", "1") is False
    assert work.add("command", "pytest -q", "0") is True
    assert len(work) == 2


def test_repeated_add_changes_nothing() -> None:
    work = WorkSet()
    work.add("file", "a.py", "write")
    before = work.fingerprint
    assert work.add("file", "a.py", "write") is False
    assert work.fingerprint == before
    assert len(work) == 1


def test_contains() -> None:
    work = WorkSet()
    work.add("source", "https://example.org")
    assert ("source", "https://example.org") in work
    assert ("source", "https://example.com") not in work
    assert ("source",) not in work
    assert ["source", "https://example.org"] not in work  # type: ignore[operator]
    assert "source" not in work  # type: ignore[operator]


def test_parts_are_not_concatenated() -> None:
    work = WorkSet()
    work.add("ab", "c")
    assert ("a", "bc") not in work
    assert work.add("a", "bc") is True


def test_parts_compare_after_nfc() -> None:
    work = WorkSet()
    work.add("cafe\u0301")
    assert ("caf\u00e9",) in work
    assert work.add("caf\u00e9") is False


def test_add_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match="strings"):
        WorkSet().add("tool", 3)  # type: ignore[arg-type]


def test_empty_fingerprint_is_fixed() -> None:
    empty = WorkSet().fingerprint
    assert len(empty) == 32
    assert int(empty, 16) >= 0
    assert WorkSet().fingerprint == empty
    work = WorkSet()
    work.add("x")
    assert work.fingerprint != empty
    work.clear()
    assert work.fingerprint == empty
    assert len(work) == 0
    assert ("x",) not in work


def test_copy_is_independent() -> None:
    work = WorkSet()
    work.add("a")
    copy = work.copy()
    assert copy.fingerprint == work.fingerprint
    assert copy.add("b") is True
    assert ("b",) not in work
    assert len(work) == 1
    assert copy.fingerprint != work.fingerprint
    work.add("b")
    assert copy.fingerprint == work.fingerprint


def test_work_sets_compare_by_identity() -> None:
    one, other = WorkSet(), WorkSet()
    assert one != other
    assert one == one


@given(st.data(), _item_lists)
def test_fingerprint_is_independent_of_order(data: st.DataObject, items: list[Item]) -> None:
    shuffled = data.draw(st.permutations(items))
    assert _filled(items).fingerprint == _filled(shuffled).fingerprint


@given(_item_lists, st.lists(st.integers(min_value=0, max_value=11)))
def test_fingerprint_is_idempotent_under_repeats(items: list[Item], repeats: list[int]) -> None:
    work = _filled(items)
    before, size = work.fingerprint, len(work)
    for index in repeats:
        if items:
            assert work.add(*items[index % len(items)]) is False
    assert work.fingerprint == before
    assert len(work) == size


@given(_item_lists, _item_lists)
def test_equal_items_give_equal_fingerprints(one: list[Item], other: list[Item]) -> None:
    # The same items arriving in two histories, with other repeats in between.
    assert _filled(one + other).fingerprint == _filled(other + one + one).fingerprint


@given(_item_lists, _items)
def test_fingerprint_changes_when_an_item_is_added(items: list[Item], item: Item) -> None:
    work = _filled(items)
    before = work.fingerprint
    new = work.add(*item)
    assert new == (before != work.fingerprint)
    assert item in work


@given(_item_lists, _item_lists)
def test_workset_agrees_with_the_naive_fingerprint(one: list[Item], other: list[Item]) -> None:
    same_naive = naive_fingerprint(one) == naive_fingerprint(other)
    same_workset = _filled(one).fingerprint == _filled(other).fingerprint
    assert same_naive == same_workset


@given(_item_lists)
def test_len_counts_distinct_items(items: list[Item]) -> None:
    distinct = {tuple(unicodedata.normalize("NFC", part) for part in item) for item in items}
    work = _filled(items)
    assert len(work) == len(distinct)
    assert all(item in work for item in items)


def test_naive_fingerprint() -> None:
    items: list[Item] = [("b", "1"), ("a", "2"), ("b", "1")]
    assert naive_fingerprint(items) == naive_fingerprint([("a", "2"), ("b", "1")])
    assert naive_fingerprint(items) != naive_fingerprint([("a", "2")])
    assert naive_fingerprint([]) == naive_fingerprint(iter([]))
