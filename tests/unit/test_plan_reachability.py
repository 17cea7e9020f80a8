"""Per-server reachability in the job plan (tjobs.cluster.reachability, tjobs.cluster.plan.pack): a node
cut off from one database server gives that server's shards to nodes that reach it, once, and nothing
moves when no node could do better."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tjobs.cluster.plan import Group, Member, Plan, moved_shards, pack
from tjobs.cluster.reachability import DB_DOWN_KEY, DB_RECOVERING_KEY, Reach, ReachRecord

S1, S2 = "db1:3306", "db2:3306"
SERVER_OF = {shard: S1 if shard < 8 else S2 for shard in range(16)}  # shards 0-7 on S1, 8-15 on S2
BEFORE = Plan(
    1,
    16,
    (
        Group(0, (0, 1, 2, 3, 8, 9, 10, 11), ("a", "b")),
        Group(1, (4, 5, 6, 7, 12, 13, 14, 15), ("b", "a")),
    ),
)


def reach(
    down: dict[str, set[str]] | None = None,
    recovering: dict[str, set[str]] | None = None,
    just_down: dict[str, set[str]] | None = None,
) -> Reach:
    """``down``: down for the grace at least; ``just_down``: down for less than the grace."""
    settled = {node: frozenset(servers) for node, servers in (down or {}).items()}
    fresh = {node: frozenset(servers) for node, servers in (just_down or {}).items()}
    return Reach(
        SERVER_OF,
        {node: settled.get(node, frozenset()) | fresh.get(node, frozenset()) for node in {*settled, *fresh}},
        {node: frozenset(servers) for node, servers in (recovering or {}).items()},
        settled,
    )


def shards_of(plan: Plan, node: str) -> set[int]:
    group = next(g for g in plan.groups if g.primary == node)
    return set(group.shards)


def on(server: str, shards: set[int]) -> set[int]:
    return {s for s in shards if SERVER_OF[s] == server}


def repack(previous: Plan, nodes: tuple[str, ...], state: Reach) -> Plan:
    return pack(previous, [Member(n) for n in nodes], 16, {}, version=previous.version + 1, reach=state)


@pytest.mark.parametrize(
    ("case", "state", "a_on_s2", "b_on_s2"),
    [
        ("a cut off from S2, b reaches it: every S2 shard to b", reach(down={"a": {S2}}), set(), set(range(8, 16))),
        ("S2 down for both: nothing moves", reach(down={"a": {S2}, "b": {S2}}), {8, 9, 10, 11}, {12, 13, 14, 15}),
        ("a recovering on S2: it keeps its S2 shards", reach(recovering={"a": {S2}}), {8, 9, 10, 11}, {12, 13, 14, 15}),
        ("both recovering (a server restart): nothing moves", reach(recovering={"a": {S2}, "b": {S2}}), {8, 9, 10, 11},
         {12, 13, 14, 15}),
        ("a down, b recovering: nobody steady, nothing moves", reach(down={"a": {S2}}, recovering={"b": {S2}}),
         {8, 9, 10, 11}, {12, 13, 14, 15}),
        ("everything reachable: nothing moves", reach(), {8, 9, 10, 11}, {12, 13, 14, 15}),
        ("a down for less than the grace (the server may be dying for b too): a keeps", reach(just_down={"a": {S2}}),
         {8, 9, 10, 11}, {12, 13, 14, 15}),
    ],
)  # fmt: skip
def test_a_cut_off_primary_gives_up_only_that_servers_shards(
    case: str, state: Reach, a_on_s2: set[int], b_on_s2: set[int]
) -> None:
    plan = repack(BEFORE, ("a", "b"), state)
    assert sorted(s for g in plan.groups for s in g.shards) == list(range(16)), case
    assert on(S2, shards_of(plan, "a")) == a_on_s2, case
    assert on(S2, shards_of(plan, "b")) == b_on_s2, case


def test_rebalancing_refills_a_cut_off_node_with_shards_of_the_servers_it_reaches() -> None:
    plan = repack(BEFORE, ("a", "b"), reach(down={"a": {S2}}))
    a = shards_of(plan, "a")
    assert on(S2, a) == set()
    assert len(a) >= 6, "balance is restored with S1 shards"


def test_each_node_cut_off_from_a_different_server_holds_only_the_other() -> None:
    plan = repack(BEFORE, ("a", "b"), reach(down={"a": {S2}, "b": {S1}}))
    assert shards_of(plan, "a") == set(range(8))
    assert shards_of(plan, "b") == set(range(8, 16))


def test_a_vanished_nodes_shards_go_to_nodes_that_reach_their_server() -> None:
    before = Plan(1, 16, (*BEFORE.groups, Group(2, (), ("c",))))
    three = repack(before, ("a", "b", "c"), reach())
    cut = repack(three, ("a", "c"), reach(down={"a": {S2}}, recovering={"c": {S1}}))  # b left
    assert on(S2, shards_of(cut, "a")) == set()
    assert on(S2, shards_of(cut, "c")) == set(range(8, 16))
    assert on(S1, shards_of(cut, "c")) <= on(S1, shards_of(three, "c")), "recovering: gets no more of S1"


def test_a_flapping_link_moves_the_shards_once() -> None:
    plan = repack(BEFORE, ("a", "b"), reach(down={"a": {S2}}))
    assert on(S2, shards_of(plan, "a")) == set()
    for state in [reach(recovering={"a": {S2}}), reach(down={"a": {S2}}), reach(recovering={"a": {S2}})] * 3:
        later = repack(plan, ("a", "b"), state)
        assert moved_shards(plan, later) == 0
        plan = later
    healed = repack(plan, ("a", "b"), reach())  # steady again: only ordinary rebalancing may move shards
    assert {g.primary for g in healed.groups} == {"a", "b"}


@pytest.mark.parametrize(
    ("case", "groups", "state", "expected"),
    [
        ("a holds S2 shards it cannot reach, b can", BEFORE, reach(down={"a": {S2}}), True),
        ("nobody reaches S2", BEFORE, reach(down={"a": {S2}, "b": {S2}}), False),
        ("a only recovering", BEFORE, reach(recovering={"a": {S2}}), False),
        ("a down for less than the grace", BEFORE, reach(just_down={"a": {S2}}), False),
        ("a holds no S2 shard", Plan(1, 16, (Group(0, tuple(range(8)), ("a",)), Group(1, tuple(range(8, 16)), ("b",)))),
         reach(down={"a": {S2}}), False),
    ],
)  # fmt: skip
def test_misplaced_says_when_the_leader_must_repack_at_once(
    case: str, groups: Plan, state: Reach, expected: bool
) -> None:
    assert state.misplaced(((g.primary, g.shards) for g in groups.groups), ["a", "b"]) is expected, case


def test_reach_reads_member_records_and_ignores_other_shapes() -> None:
    members: dict[str, dict[str, object]] = {
        "a": {DB_DOWN_KEY: {S2: 10_000}, DB_RECOVERING_KEY: []},
        "b": {},
        "c": {DB_DOWN_KEY: "junk"},
        "d": {DB_DOWN_KEY: {S1: 11_500}, DB_RECOVERING_KEY: [S2]},
    }
    state = Reach.from_members(members, SERVER_OF, now_ms=12_000, grace_ms=2_000)
    assert state.down == {"a": frozenset({S2}), "b": frozenset(), "c": frozenset(), "d": frozenset({S1})}
    assert state.evicted == {"a": frozenset({S2}), "b": frozenset(), "c": frozenset(), "d": frozenset()}
    assert state.recovering["d"] == frozenset({S2})
    assert state.constrained(["a", "b", "c", "d"]) == frozenset({S1, S2})


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (unreachable servers, now_ms) in order -> the record's last value
        ([(set(), 0)], {DB_DOWN_KEY: {}, DB_RECOVERING_KEY: []}),
        ([({S2}, 0)], {DB_DOWN_KEY: {S2: 0}, DB_RECOVERING_KEY: []}),
        ([({S2}, 0), ({S2}, 700)], {DB_DOWN_KEY: {S2: 0}, DB_RECOVERING_KEY: []}),  # since: the first failure
        ([({S2}, 0), (set(), 1_000)], {DB_DOWN_KEY: {}, DB_RECOVERING_KEY: [S2]}),
        ([({S2}, 0), (set(), 1_000), (set(), 10_999)], {DB_DOWN_KEY: {}, DB_RECOVERING_KEY: [S2]}),
        ([({S2}, 0), (set(), 1_000), (set(), 11_000)], {DB_DOWN_KEY: {}, DB_RECOVERING_KEY: []}),
        # a flap restarts the hold from its last recovery
        ([({S2}, 0), (set(), 1_000), ({S2}, 5_000), (set(), 6_000), (set(), 12_000)],
         {DB_DOWN_KEY: {}, DB_RECOVERING_KEY: [S2]}),
        ([({S1, S2}, 0), ({S2}, 1_000)], {DB_DOWN_KEY: {S2: 0}, DB_RECOVERING_KEY: [S1]}),
    ],
)  # fmt: skip
def test_reach_record_holds_a_recovered_server_for_the_hold(
    steps: list[tuple[set[str], int]], expected: dict[str, object]
) -> None:
    record = ReachRecord(hold_ms=10_000)
    value: dict[str, object] = {}
    for unreachable, now_ms in steps:
        value = record.update(unreachable, now_ms)
    assert value == expected


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.integers(min_value=1, max_value=5),
    down=st.lists(st.tuples(st.integers(0, 4), st.sampled_from([S1, S2])), max_size=6),
    recovering=st.lists(st.tuples(st.integers(0, 4), st.sampled_from([S1, S2])), max_size=4),
)
def test_no_primary_holds_a_server_it_cannot_reach_while_another_node_can(
    nodes: int, down: list[tuple[int, str]], recovering: list[tuple[int, str]]
) -> None:
    names = tuple("abcde"[:nodes])
    down_of: dict[str, set[str]] = {}
    for index, server in down:
        down_of.setdefault("abcde"[index], set()).add(server)
    recovering_of: dict[str, set[str]] = {}
    for index, server in recovering:
        recovering_of.setdefault("abcde"[index], set()).add(server)
    state = reach(down_of, recovering_of)
    plan = repack(repack(BEFORE, names, reach()), names, state)
    assert sorted(s for g in plan.groups for s in g.shards) == list(range(16))
    assert not state.misplaced(((g.primary, g.shards) for g in plan.groups), names)
