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


def test_one_generator_never_mints_an_id_it_minted_recently_even_when_its_random_bits_repeat() -> None:
    # Two creates of one node in the same millisecond and shard drew the same 12 bits 1 in 4,096 times:
    # group-committed together, both could time out and both answers name one task (see sharding/ids.py)
    ids = TaskIdGenerator(512, lambda bits: 7)
    first, second = ids.mint(5, NOW_MS), ids.mint(5, NOW_MS)
    assert first != second
    assert {shard_of_task_id(first), shard_of_task_id(second)} == {5}
    assert first >> 22 == second >> 22 == NOW_MS - ID_EPOCH_MS


def test_a_clock_stepped_back_does_not_mint_the_ids_of_the_milliseconds_it_lived_before() -> None:
    ids = TaskIdGenerator(512, lambda bits: 7)
    before = {ids.mint(9, NOW_MS + ms) for ms in range(0, 2000, 2) for _ in range(2)}
    again = {ids.mint(9, NOW_MS + ms) for ms in range(0, 2000, 2) for _ in range(2)}  # the same 2 s again
    assert len(before) == 2000 and not before & again


def test_every_value_of_a_millisecond_and_shard_is_minted_once_before_any_repeats() -> None:
    ids = TaskIdGenerator(512, random.Random(11).getrandbits)
    assert len({ids.mint(1, NOW_MS) for _ in range(4096)}) == 4096
