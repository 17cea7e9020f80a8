"""The shard map as a value (sharding/shard_map.py): seeded like the configured list always placed
databases, moved and re-seeded under the next epoch, and differences with a configured list in words."""

from __future__ import annotations

import pytest

from sharding import Topology
from sharding.shard_map import ShardMap, ShardMapError

TOPOLOGY = Topology(4, 2, 4)  # 8 logical databases, two per instance


def test_the_seed_places_instance_i_on_server_i_modulo_the_list() -> None:
    seeded = ShardMap.seed(["a:1", "b:2"], TOPOLOGY)

    assert seeded.epoch == 1
    assert seeded.servers == ("a:1", "b:2")
    assert seeded.placement == ("a:1", "a:1", "b:2", "b:2", "a:1", "a:1", "b:2", "b:2")


def test_a_server_listed_twice_is_one_server() -> None:
    seeded = ShardMap.seed(["a:1", "a:1"], TOPOLOGY)

    assert seeded.servers == ("a:1",)
    assert set(seeded.placement) == {"a:1"}


def test_a_move_advances_the_epoch_and_learns_a_new_server() -> None:
    seeded = ShardMap.seed(["a:1"], TOPOLOGY)

    moved = seeded.moved(5, "b:2")

    assert moved.epoch == 2
    assert moved.servers == ("a:1", "b:2")
    assert moved.server_of(5) == "b:2" and moved.databases_on("b:2") == [5]
    assert moved.databases_on("a:1") == [0, 1, 2, 3, 4, 6, 7]


def test_the_first_logical_database_never_moves() -> None:
    with pytest.raises(ShardMapError, match="does not move"):
        ShardMap.seed(["a:1", "b:2"], TOPOLOGY).moved(0, "b:2")


def test_a_reseed_keeps_placements_and_refuses_to_drop_a_server_holding_databases() -> None:
    seeded = ShardMap.seed(["a:1", "b:2"], TOPOLOGY)

    grown = seeded.with_servers(["a:1", "b:2", "c:3"])
    assert grown.epoch == 2 and grown.servers == ("a:1", "b:2", "c:3") and grown.placement == seeded.placement
    with pytest.raises(ShardMapError, match=r"b:2 holds logical databases 2, 3, 6, 7"):
        seeded.with_servers(["a:1"])


def test_differences_name_each_unknown_missing_or_reordered_server() -> None:
    stored = ShardMap.seed(["a:1", "b:2"], TOPOLOGY)

    assert stored.differences(["a:1", "b:2"]) == []
    assert stored.differences(["a:1", "b:2", "c:3"]) == ["storage.urls lists c:3, which the shard map does not know"]
    assert stored.differences(["a:1"]) == [
        "storage.urls lacks b:2, a server of the shard map (it holds logical databases 2, 3, 6, 7)"
    ]
    assert stored.differences(["b:2", "a:1"]) == [
        "storage.urls lists the servers in the order ['b:2', 'a:1'], the shard map in the order ['a:1', 'b:2']"
    ]


def test_the_json_document_round_trips_and_a_bad_one_is_refused() -> None:
    stored = ShardMap.seed(["a:1", "b:2"], TOPOLOGY).moved(3, "c:3")

    assert ShardMap.from_json(stored.to_json()) == stored
    with pytest.raises(ShardMapError):
        ShardMap.from_json({"epoch": 1, "servers": ["a:1"], "placement": [0, 1]})
    with pytest.raises(ShardMapError):
        ShardMap.from_json({"servers": ["a:1"]})
