"""Job packing (tjobs.cluster.plan): validity, balance, zones, and stickiness on join and leave."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tjobs.cluster.plan import Member, Plan, group_load, moved_shards, needs_replan, pack, weight


def members(*ids: str, zones: str = "") -> list[Member]:
    return [Member(node_id, zones[i % len(zones)] if zones else "") for i, node_id in enumerate(ids)]


def assert_valid(plan: Plan, live: list[Member], shard_count: int) -> None:
    every = [s for g in plan.groups for s in g.shards]
    assert sorted(every) == list(range(shard_count)), "every shard in exactly one group"
    assert {g.primary for g in plan.groups} == {m.node_id for m in live}, "one group per live node"
    for group in plan.groups:
        assert len(set(group.nodes)) == len(group.nodes), "primary and backups are distinct"
        assert len(group.nodes) == min(3, len(live))
        assert set(group.nodes) <= {m.node_id for m in live}
    assert len({g.id for g in plan.groups}) == len(plan.groups)


def assert_balanced(plan: Plan, loads: dict[int, int], shard_count: int) -> None:
    max_weight = max(weight(loads, s) for s in range(shard_count))
    totals = [group_load(g.shards, loads) for g in plan.groups]
    mean = sum(totals) / len(totals)
    allowed = max(max_weight, int(mean * 0.05))
    assert max(totals) - min(totals) <= allowed + max_weight, totals


@pytest.mark.parametrize(
    ("nodes", "shard_count", "expected_sizes"),
    [
        (("a",), 16, [16]),
        (("a", "b"), 16, [8, 8]),
        (("a", "b", "c"), 16, [5, 5, 6]),
        (("a", "b", "c", "d"), 512, [128, 128, 128, 128]),
        (("a", "b", "c", "d", "e"), 3, [0, 0, 1, 1, 1]),
    ],
)
def test_uniform_load_splits_shards_evenly(nodes: tuple[str, ...], shard_count: int, expected_sizes: list[int]) -> None:
    live = members(*nodes)
    plan = pack(None, live, shard_count, {}, version=1)
    assert_valid(plan, live, shard_count)
    assert sorted(len(g.shards) for g in plan.groups) == expected_sizes


def test_balance_is_by_load_not_count() -> None:
    loads = {0: 1000} | {s: 10 for s in range(1, 16)}
    plan = pack(None, members("a", "b"), 16, loads, version=1)
    by_size = sorted(plan.groups, key=lambda g: len(g.shards))
    assert 0 in by_size[0].shards, "the hot shard sits alone-ish in the small group"
    assert len(by_size[1].shards) == 15


def test_backups_prefer_other_zones() -> None:
    live = [Member("a1", "a"), Member("a2", "a"), Member("b1", "b"), Member("c1", "c")]
    plan = pack(None, live, 16, {}, version=1)
    zone = {m.node_id: m.zone for m in live}
    for group in plan.groups:
        assert len({zone[n] for n in group.nodes}) == 3, group


def test_unchanged_membership_moves_nothing() -> None:
    live = members("a", "b", "c")
    first = pack(None, live, 64, {s: s % 7 for s in range(64)}, version=1)
    second = pack(first, live, 64, {s: (s % 7) + 1 for s in range(64)}, version=2)
    assert moved_shards(first, second) == 0
    assert [g.nodes for g in first.groups] == [g.nodes for g in second.groups]


def test_leave_moves_only_the_departed_nodes_shards() -> None:
    first = pack(None, members("a", "b", "c"), 48, {}, version=1)
    gone = next(g for g in first.groups if g.primary == "b")
    second = pack(first, members("a", "c"), 48, {}, version=2)
    assert_valid(second, members("a", "c"), 48)
    assert moved_shards(first, second) == len(gone.shards)


def test_join_moves_about_one_share_to_the_newcomer() -> None:
    first = pack(None, members("a", "b", "c"), 48, {}, version=1)
    second = pack(first, members("a", "b", "c", "d"), 48, {}, version=2)
    assert_valid(second, members("a", "b", "c", "d"), 48)
    newcomer = next(g for g in second.groups if g.primary == "d")
    assert len(newcomer.shards) == 12
    assert moved_shards(first, second) == 12


def test_group_ids_survive_replans() -> None:
    first = pack(None, members("a", "b"), 8, {}, version=1)
    second = pack(first, members("a", "b", "c"), 8, {}, version=2)
    ids_before = {g.primary: g.id for g in first.groups}
    ids_after = {g.primary: g.id for g in second.groups}
    assert ids_after["a"] == ids_before["a"] and ids_after["b"] == ids_before["b"]
    assert ids_after["c"] not in ids_before.values()


def test_no_members_means_no_groups() -> None:
    assert pack(None, [], 8, {}, version=3).groups == ()


def test_plan_round_trips_through_json() -> None:
    plan = pack(None, members("a", "b", "c"), 16, {}, version=7, now_ms=123, leader="a")
    again = Plan.from_json(plan.to_json())
    assert again.groups == plan.groups and again.version == 7 and again.leader == "a"


def test_needs_replan_on_join_leave_and_topology_change() -> None:
    live = members("a", "b")
    plan = pack(None, live, 16, {}, version=1)
    assert not needs_replan(plan, live, 16)
    assert needs_replan(plan, members("a"), 16)
    assert needs_replan(plan, members("a", "b", "c"), 16)
    assert needs_replan(plan, live, 32)
    assert needs_replan(None, live, 16)


node_ids = st.lists(st.sampled_from([f"n{i}" for i in range(8)]), min_size=1, max_size=8, unique=True)


@settings(max_examples=200, deadline=None)
@given(
    before=node_ids,
    after=node_ids,
    shard_count=st.integers(1, 128),
    load_seed=st.lists(st.integers(0, 50), min_size=1, max_size=16),
)
def test_any_membership_change_yields_a_valid_balanced_plan(
    before: list[str], after: list[str], shard_count: int, load_seed: list[int]
) -> None:
    loads = {s: load_seed[s % len(load_seed)] for s in range(shard_count)}
    first = pack(None, members(*before, zones="xyz"), shard_count, loads, version=1)
    assert_valid(first, members(*before), shard_count)
    assert_balanced(first, loads, shard_count)
    live = members(*after, zones="xyz")
    second = pack(first, live, shard_count, loads, version=2)
    assert_valid(second, live, shard_count)
    assert_balanced(second, loads, shard_count)


@settings(max_examples=100, deadline=None)
@given(nodes=st.integers(2, 8), shard_count=st.integers(16, 256), leaving=st.integers(0, 7))
def test_uniform_leave_and_join_move_at_most_one_share(nodes: int, shard_count: int, leaving: int) -> None:
    ids = [f"n{i}" for i in range(nodes)]
    first = pack(None, members(*ids), shard_count, {}, version=1)
    gone = ids[leaving % nodes]
    second = pack(first, members(*[i for i in ids if i != gone]), shard_count, {}, version=2)
    share_before = math.ceil(shard_count / nodes)
    assert moved_shards(first, second) <= share_before + 1
    third = pack(second, members(*ids), shard_count, {}, version=3)
    assert moved_shards(second, third) <= share_before + 1
