"""Picking executors (tjobs.pools.selection), the circuit breaker and the pool route spec: pure, no services."""

from __future__ import annotations

from collections import Counter

import pytest

from tjobs.errors import InvalidInput
from tjobs.pools.breaker import CircuitBreakers
from tjobs.pools.model import Executor
from tjobs.pools.selection import RoundRobin, least_in_flight, one_per_zone, rendezvous_order, with_room
from tjobs.specs.pool import HashOn, Mode, PoolRoute, Strategy, parse_pool_route


def pool(count: int, zones: tuple[str, ...] = ("a",), **weights: int) -> list[Executor]:
    return [
        Executor(f"e{i}", f"http://10.0.0.{i}:80", zones[i % len(zones)], weights.get(f"e{i}", 1)) for i in range(count)
    ]


# ---- round robin -------------------------------------------------------------------------------------


def test_round_robin_over_equal_weights_goes_executor_after_executor() -> None:
    executors = pool(5)
    picker = RoundRobin()
    picks = [picker.pick(executors).id for _ in range(10)]
    assert picks == ["e0", "e1", "e2", "e3", "e4"] * 2


def test_round_robin_follows_the_weights_without_bursts() -> None:
    executors = pool(3, e0=3)
    picker = RoundRobin()
    picks = [picker.pick(executors).id for _ in range(50)]
    assert Counter(picks) == Counter({"e0": 30, "e1": 10, "e2": 10})
    assert "e0e0e0e0" not in "".join(picks)  # smooth: never four in a row


def test_round_robin_over_a_changing_pool_still_spreads_evenly() -> None:
    picker = RoundRobin()
    executors = pool(4)
    picks = [picker.pick(executors).id for _ in range(8)]
    picks += [picker.pick(executors[1:]).id for _ in range(9)]  # e0 left
    assert Counter(picks[8:]) == Counter({"e1": 3, "e2": 3, "e3": 3})


# ---- consistent hash ---------------------------------------------------------------------------------


def test_consistent_hash_sends_a_key_to_the_same_executor_and_moves_only_the_keys_of_one_that_left() -> None:
    executors = pool(5)
    keys = [f"task-{i}" for i in range(500)]
    before = {key: rendezvous_order(executors, key)[0].id for key in keys}
    assert before == {key: rendezvous_order(list(reversed(executors)), key)[0].id for key in keys}
    assert min(Counter(before.values()).values()) > 60  # spread: 100 each expected
    after = {key: rendezvous_order(executors[1:], key)[0].id for key in keys}
    assert {key for key in keys if before[key] != after[key]} == {key for key in keys if before[key] == "e0"}


def test_consistent_hash_failover_goes_to_the_keys_next_executor() -> None:
    executors = pool(5)
    order = rendezvous_order(executors, "task-7")
    assert rendezvous_order([e for e in executors if e.id != order[0].id], "task-7")[0] == order[1]


# ---- least in flight, capacity, zones ----------------------------------------------------------------


def test_least_in_flight_picks_the_least_loaded_per_weight_and_rotates_ties() -> None:
    executors = pool(3, e2=2)
    assert least_in_flight(executors, {"e0": 1, "e1": 3, "e2": 3}, 0).id == "e0"
    assert least_in_flight(executors, {"e0": 2, "e1": 3, "e2": 3}, 0).id == "e2"  # 3 / weight 2
    assert {least_in_flight(executors, {}, turn).id for turn in range(3)} == {"e0", "e1", "e2"}


def test_capacity_is_soft_an_executor_at_capacity_is_passed_over_unless_all_are() -> None:
    full, roomy = Executor("full", "http://a", capacity=2), Executor("roomy", "http://b", capacity=2)
    assert with_room([full, roomy], {"full": 2, "roomy": 1}) == [roomy]
    assert with_room([full, roomy], {"full": 2, "roomy": 2}) == [full, roomy]


def test_one_per_zone_picks_one_executor_in_every_zone() -> None:
    executors = pool(5, zones=("z1", "z2"))
    picked = one_per_zone(executors, lambda zone, candidates: candidates[0])
    assert [(e.zone, e.id) for e in picked] == [("z1", "e0"), ("z2", "e1")]


# ---- circuit breaker ---------------------------------------------------------------------------------


def test_a_failing_executor_is_skipped_for_a_doubling_backoff_and_a_success_closes_it() -> None:
    breakers = CircuitBreakers(base_ms=1000, max_ms=4000)
    key = ("app", "workers", "e0")
    assert not breakers.is_open(key, 0)
    assert breakers.failed(key, 0) == 1000
    assert breakers.is_open(key, 999) and not breakers.is_open(key, 1000)  # half-open: offered again
    assert breakers.failed(key, 1000) == 3000
    assert breakers.failed(key, 3000) == 7000  # capped at max_ms
    breakers.succeeded(key)
    assert not breakers.is_open(key, 3001)
    assert breakers.failed(key, 10_000) == 11_000  # the count started over


# ---- the route spec ----------------------------------------------------------------------------------


def test_a_pool_route_defaults_to_one_by_round_robin_and_stores_only_what_differs() -> None:
    route = parse_pool_route("workers")
    assert route == PoolRoute("workers", Mode.ONE, Strategy.ROUND_ROBIN, HashOn.TASK_ID)
    assert route.to_json() == {"name": "workers"}
    sharded = parse_pool_route({"name": "w", "mode": "sharded", "shard_total": 2, "shard_params": ["a", "b"]})
    assert parse_pool_route(sharded.to_json()) == sharded
    hashed = parse_pool_route(
        {"name": "w", "strategy": "consistent_hash", "hash_on": "key", "path": "/run", "overlap": "queue_one"}
    )
    assert parse_pool_route(hashed.to_json()) == hashed
    assert hashed.url_of("http://10.0.0.1:80/") == "http://10.0.0.1:80/run"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (7, "callback.pool"),
        ({"name": "Bad Name"}, "callback.pool.name"),
        ({"name": "w", "mode": "some"}, "callback.pool.mode"),
        ({"name": "w", "strategy": "random"}, "callback.pool.strategy"),
        ({"name": "w", "mode": "all", "strategy": "round_robin"}, "callback.pool.strategy"),
        ({"name": "w", "hash_on": "key"}, "callback.pool.hash_on"),
        ({"name": "w", "mode": "sharded"}, "callback.pool.shard_total"),
        ({"name": "w", "mode": "sharded", "shard_total": 0}, "callback.pool.shard_total"),
        ({"name": "w", "mode": "sharded", "shard_total": True}, "callback.pool.shard_total"),
        ({"name": "w", "shard_total": 3}, "callback.pool.shard_total"),
        ({"name": "w", "mode": "sharded", "shard_total": 2, "shard_params": ["a"]}, "callback.pool.shard_params"),
        ({"name": "w", "mode": "sharded", "shard_total": 1, "shard_params": [1]}, "callback.pool.shard_params[0]"),
        ({"name": "w", "path": "run"}, "callback.pool.path"),
        ({"name": "w", "path": "/a b"}, "callback.pool.path"),
        ({"name": "w", "color": "red"}, "callback.pool.color"),
        ({"name": "w", "overlap": "never"}, "callback.pool.overlap"),
    ],
)
def test_a_bad_pool_route_is_refused_naming_the_field(raw: object, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_pool_route(raw)
    assert refused.value.field == field
