"""Task ids that carry their shard, and the deterministic shard of an idempotency key.

A task id is a positive 63-bit integer::

    | 41 bits: ms since 2025-01-01 UTC | 10 bits: shard | 12 bits: random |

so any node routes by id alone and ids sort roughly by creation time. One generator (one node) never
mints an id equal to one of the last :data:`RECENT_IDS` it minted, a clock stepped back included: a
repeated draw takes the next free value of its millisecond and shard. Two nodes minting ids at the same
millisecond for the same shard still collide with probability 1/4096; the store's primary key turns a
collision into a retry, never into two tasks with one id. (Within one node a collision cost more: two
creates group-committed together that both outlive the create timeout are both answered
``storage_outcome_unknown`` naming the one id, which only one of them can hold.)
"""

from __future__ import annotations

import hashlib
import secrets
from collections import deque
from collections.abc import Callable

from sharding.topology import MAX_SHARDS

ID_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
_RANDOM_BITS = 12
_SHARD_BITS = 10
_TIME_BITS = 41
_SHARD_MASK = (1 << _SHARD_BITS) - 1
_RANDOM_MASK = (1 << _RANDOM_BITS) - 1
RECENT_IDS = 4096  # ids a generator remembers: ~20 s of single creates at 200/s, 0.14 s at 30,000/s
assert (1 << _SHARD_BITS) == MAX_SHARDS


def shard_of_task_id(task_id: int) -> int:
    """The shard a task id was minted for."""
    if task_id <= 0:
        raise ValueError(f"task id must be positive, got {task_id}")
    return (task_id >> _RANDOM_BITS) & _SHARD_MASK


def shard_for_key(app_id: str, key: str, shard_count: int) -> int:
    """The one shard where the idempotency key ``(app_id, key)`` may live.

    Stable across processes and releases (BLAKE2b, not ``hash()``), so a unique index inside that
    shard's table is enough for per-app uniqueness; no global index is needed.
    """
    digest = hashlib.blake2b(f"{app_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


class TaskIdGenerator:
    """Mints task ids; ``now_ms`` is passed in so the encoding is pure and testable."""

    def __init__(self, shard_count: int, random_bits: Callable[[int], int] = secrets.randbits) -> None:
        """``random_bits(n)`` gives an id's random bits: the OS's by default; a node minting many ids passes a
        PRNG seeded from the OS (``random.Random().getrandbits``: the bits only need to be uniform, and a
        syscall per id was 2-3 % of a batch create's CPU)."""
        if not 1 <= shard_count <= MAX_SHARDS:
            raise ValueError(f"shard_count must be within 1..{MAX_SHARDS}, got {shard_count}")
        self.shard_count = shard_count
        self._random_bits = random_bits
        self._recent: set[int] = set()
        self._order: deque[int] = deque()

    def random_shard(self) -> int:
        return secrets.randbelow(self.shard_count)

    @staticmethod
    def remint(task_id: int) -> int:
        """Another id of the same millisecond and shard (new random bits): what a store uses when an
        id it was asked to insert is already taken, so the task keeps its shard and its place."""
        random_bits = secrets.randbits(_RANDOM_BITS)
        while random_bits == task_id & _RANDOM_MASK:
            random_bits = secrets.randbits(_RANDOM_BITS)
        return (task_id & ~_RANDOM_MASK) | random_bits

    def mint(self, shard: int, now_ms: int) -> int:
        if not 0 <= shard < self.shard_count:
            raise ValueError(f"shard {shard} is outside 0..{self.shard_count - 1}")
        elapsed_ms = now_ms - ID_EPOCH_MS
        if not 0 <= elapsed_ms < (1 << _TIME_BITS):
            raise ValueError(f"now_ms {now_ms} is outside the id epoch")
        base = (elapsed_ms << (_SHARD_BITS + _RANDOM_BITS)) | (shard << _RANDOM_BITS)
        random_bits = self._random_bits(_RANDOM_BITS)
        task_id = base | random_bits
        recent = self._recent
        probes = 1
        while task_id in recent and probes < 1 << _RANDOM_BITS:  # all 4,096 taken: the store's retry settles it
            random_bits = (random_bits + 1) & _RANDOM_MASK
            task_id = base | random_bits
            probes += 1
        if len(self._order) >= RECENT_IDS:
            recent.discard(self._order.popleft())
        recent.add(task_id)
        self._order.append(task_id)
        return task_id
