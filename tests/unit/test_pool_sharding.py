"""``sharded`` routing's assignment (tjobs.pools.sharding): even, stable, deterministic (properties)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tjobs.pools.sharding import assign_items, items_of

EXECUTORS = [f"e{i}" for i in range(12)]
live_sets = st.lists(st.sampled_from(EXECUTORS), min_size=1, max_size=12, unique=True)
totals = st.integers(min_value=1, max_value=64)


def spread(assignment: dict[int, str], live: list[str]) -> list[int]:
    held = Counter(assignment.values())
    return [held.get(executor, 0) for executor in live]


@given(live=live_sets, total=totals)
def test_every_item_goes_to_exactly_one_live_executor_and_the_split_is_even(live: list[str], total: int) -> None:
    assignment = assign_items({}, live, total)
    assert sorted(assignment) == list(range(total))
    assert set(assignment.values()) <= set(live)
    counts = spread(assignment, live)
    assert max(counts) - min(counts) <= 1


@given(before=live_sets, after=live_sets, total=totals)
def test_an_item_moves_only_when_its_holder_left_or_held_more_than_its_share(
    before: list[str], after: list[str], total: int
) -> None:
    previous = assign_items({}, before, total)
    current = assign_items(previous, after, total)
    counts = spread(current, after)
    assert sorted(current) == list(range(total))
    assert max(counts) - min(counts) <= 1  # still even
    for item, holder in previous.items():
        if holder in after and len(items_of(previous, holder)) <= total // len(after):
            assert current[item] == holder  # its holder stayed and was within its share: it stays


@given(before=live_sets, after=live_sets, total=totals)
def test_as_few_items_move_as_evenness_allows(before: list[str], after: list[str], total: int) -> None:
    previous = assign_items({}, before, total)
    current = assign_items(previous, after, total)
    moved = sum(1 for item in range(total) if previous[item] != current[item])
    base, extra = divmod(total, len(after))
    # Each staying executor may keep at most its quota; the `extra` larger quotas go to the biggest holders.
    kept = sorted((len(items_of(previous, e)) for e in after), reverse=True)
    keepable = sum(min(held, base + (1 if rank < extra else 0)) for rank, held in enumerate(kept))
    assert moved == total - keepable


@given(live=live_sets, total=totals)
def test_an_unchanged_pool_keeps_every_item_where_it_is(live: list[str], total: int) -> None:
    first = assign_items({}, live, total)
    assert assign_items(first, live, total) == first
    assert assign_items(first, list(reversed(live)), total) == first  # order of the live list is irrelevant


def test_a_sixth_executor_takes_one_item_from_each_of_the_others_that_has_a_surplus() -> None:
    five = [f"e{i}" for i in range(5)]
    previous = assign_items({}, five, 10)  # two each
    current = assign_items(previous, [*five, "e5"], 10)
    assert Counter(current.values())["e5"] == 1  # 10 over 6: four hold 2, two hold 1
    assert sum(1 for item in range(10) if previous[item] != current[item]) == 1


def test_the_items_of_a_dead_executor_go_to_the_live_ones_and_nothing_else_moves() -> None:
    five = [f"e{i}" for i in range(5)]
    previous = assign_items({}, five, 10)
    current = assign_items(previous, five[1:], 10)
    moved = {item for item in range(10) if previous[item] != current[item]}
    assert moved == set(items_of(previous, "e0"))
    assert Counter(current.values()) == Counter({"e1": 3, "e2": 3, "e3": 2, "e4": 2})


def test_no_live_executor_assigns_nothing() -> None:
    assert assign_items({0: "e0"}, [], 4) == {}
