"""The rebalance plan (sharding/rebalance.py): after its moves the logical databases are spread
evenly over the listed servers, database 0 stays, the fewest databases move, each at most once and
never onto a server that gives one away; planning again proposes nothing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharding.rebalance import Move, apply_moves, plan_rebalance
from sharding.shard_map import ShardMap, ShardMapError

NAMES = [f"db{i}:3306" for i in range(8)]


@st.composite
def maps_and_lists(draw: st.DrawFn) -> tuple[ShardMap, list[str]]:
    """A map of 1..64 databases over 1..5 servers, and a new list: the same first server, then any
    of the others and some new ones, in any order."""
    old_count = draw(st.integers(1, 5))
    servers = tuple(NAMES[:old_count])
    database_count = draw(st.integers(1, 64))
    placement = (servers[0], *(draw(st.sampled_from(servers)) for _ in range(database_count - 1)))
    shard_map = ShardMap(draw(st.integers(1, 9)), servers, placement)
    rest = draw(st.lists(st.sampled_from(NAMES[1:]), unique=True, max_size=7))
    return shard_map, [servers[0], *rest]


def counts(shard_map: ShardMap, servers: list[str]) -> list[int]:
    held = Counter(shard_map.placement)
    return [held[server] for server in servers]


@settings(max_examples=400, deadline=None)
@given(maps_and_lists())
def test_after_the_moves_every_listed_server_holds_its_even_share_and_no_other_holds_any(
    case: tuple[ShardMap, list[str]],
) -> None:
    shard_map, servers = case
    after = apply_moves(shard_map, plan_rebalance(shard_map, servers))

    assert set(after.placement) <= set(servers)
    held = counts(after, servers)
    assert max(held) - min(held) <= 1
    assert after.placement[0] == shard_map.placement[0]


@settings(max_examples=400, deadline=None)
@given(maps_and_lists())
def test_each_database_moves_at_most_once_never_database_0_and_never_onto_a_server_that_gives_one_away(
    case: tuple[ShardMap, list[str]],
) -> None:
    shard_map, servers = case
    moves = plan_rebalance(shard_map, servers)

    moved = [move.database for move in moves]
    assert len(moved) == len(set(moved)) and 0 not in moved
    assert not {move.source for move in moves} & {move.target for move in moves}
    assert all(shard_map.placement[move.database] == move.source for move in moves)
    assert moved == sorted(moved)


@settings(max_examples=400, deadline=None)
@given(maps_and_lists())
def test_the_fewest_databases_move(case: tuple[ShardMap, list[str]]) -> None:
    """The fewest: every database on an unlisted server, plus what each listed server holds above
    its share, the extra ones of the share going to the servers that hold the most."""
    shard_map, servers = case
    base, extra = divmod(len(shard_map.placement), len(servers))
    held = sorted(counts(shard_map, servers), reverse=True)
    shares = [base + 1] * extra + [base] * (len(servers) - extra)
    least = sum(1 for name in shard_map.placement if name not in servers)
    least += sum(max(0, have - share) for have, share in zip(held, shares, strict=True))

    moves = plan_rebalance(shard_map, servers)

    first_short = base == 0 and counts(shard_map, servers)[0] < held[extra - 1] if extra else False
    assert len(moves) == least or (first_short and len(moves) == least + 1)


@settings(max_examples=200, deadline=None)
@given(maps_and_lists())
def test_planning_again_after_the_moves_proposes_nothing(case: tuple[ShardMap, list[str]]) -> None:
    shard_map, servers = case
    after = apply_moves(shard_map.with_servers([*shard_map.servers, *servers]), plan_rebalance(shard_map, servers))

    assert plan_rebalance(after, servers) == []


def test_adding_a_server_moves_a_third_of_the_databases_onto_it() -> None:
    shard_map = ShardMap(4, ("a:1", "b:1"), ("a:1",) * 6 + ("b:1",) * 6)

    moves = plan_rebalance(shard_map, ["a:1", "b:1", "c:1"])

    assert moves == [Move(4, "a:1", "c:1"), Move(5, "a:1", "c:1"), Move(10, "b:1", "c:1"), Move(11, "b:1", "c:1")]


def test_draining_a_server_moves_all_its_databases_to_the_others() -> None:
    shard_map = ShardMap(2, ("a:1", "b:1", "c:1"), ("a:1", "b:1", "c:1", "b:1", "c:1", "a:1"))

    moves = plan_rebalance(shard_map, ["a:1", "b:1"])

    assert moves == [Move(2, "c:1", "a:1"), Move(4, "c:1", "b:1")]


def test_a_list_that_does_not_start_with_the_server_of_database_0_is_refused() -> None:
    shard_map = ShardMap(1, ("a:1", "b:1"), ("a:1", "b:1"))

    with pytest.raises(ShardMapError, match="must start with a:1"):
        plan_rebalance(shard_map, ["b:1", "a:1"])
