"""Task ids: time, shard and random bits; the random bits come from the source the generator is given."""

from __future__ import annotations

import random

from sharding import TaskIdGenerator, shard_of_task_id
from sharding.ids import ID_EPOCH_MS

NOW_MS = ID_EPOCH_MS + 86_400_000


def test_an_id_carries_its_shard_and_millisecond_and_the_given_random_bits() -> None:
    ids = TaskIdGenerator(512, lambda bits: (1 << bits) - 1)
    task_id = ids.mint(300, NOW_MS)
    assert shard_of_task_id(task_id) == 300
    assert task_id >> 22 == NOW_MS - ID_EPOCH_MS and task_id & 0xFFF == 0xFFF


def test_ids_from_a_seeded_prng_are_spread_over_the_random_bits() -> None:
    ids = TaskIdGenerator(512, random.Random(7).getrandbits)
    minted = {ids.mint(5, NOW_MS) for _ in range(1000)}
    assert len(minted) > 850  # 1,000 draws of 4,096 values: about 890 distinct
    assert {shard_of_task_id(task_id) for task_id in minted} == {5}


def test_by_default_the_random_bits_come_from_the_os() -> None:
    ids = TaskIdGenerator(512)
    assert len({ids.mint(5, NOW_MS) for _ in range(100)}) > 90
