"""A hierarchical timing wheel: the in-memory index of the tasks a node will fire soon.

The wheel is pure: it never reads a clock. Time enters only as epoch-millisecond ints passed to
:class:`TimingWheel` (``now_ms``) and :meth:`TimingWheel.advance`.

Shape
-----
Time is cut into ticks of ``tick_ms``; an entry's tick is ``fire_at_ms // tick_ms``. A tick is a number
written in mixed radix: level ``L`` has ``level_slots[L]`` slots (powers of two) and owns one digit of
it. With the default ``(256, 64, 64, 64)`` and 10 ms ticks, one slot of level 0, 1, 2, 3 spans 10 ms,
2.56 s, 2 min 44 s and 2 h 55 min, and the four levels together one *block* of 7 d 18 h. Entries of
later blocks wait in the overflow, one node per block, until the wheel reaches their block.

Placement is by shared prefix, not by distance: an entry of tick ``t`` sits at the lowest level ``L``
whose *higher* digits of ``t`` equal those of the wheel's current tick ``c`` (a function of
``(t ^ c).bit_length()``), in the slot named by ``t``'s level-``L`` digit. Hence

- levels are ordered: every entry of level ``L`` fires before every entry of level ``L + 1``, and within
  a level the slots are in index order; slots behind the current one are empty;
- an entry's place is recomputable from ``fire_at_ms`` and the current tick, so ``cancel`` finds it
  without a stored location: O(1) insert and removal, no tombstones, ``len`` exact.

A slot of level ``L >= 1`` is a small radix tree, not a flat bag: a dict from the level-``(L - 1)``
digit to the node of that sub-slot, down to level-0 nodes keyed by task id. When the wheel enters such
a slot, its children simply *become* the slots of level ``L - 1``: a cascade costs O(slots per level)
whatever the number of entries under it, so a million entries loaded minutes ahead never cause a
burst of re-placements (as a flat-bucket wheel's ``advance`` does).

:meth:`TimingWheel.advance` never walks ticks one by one: a bitmap of occupied slots per level lets it
jump to the next occupied level-0 slot or the next occupied higher slot, so its cost follows the
occupied slots it passes and the entries it returns, not the time elapsed (an empty wheel jumps ten
minutes, or ten days, in microseconds).

Entries added with ``fire_at_ms`` at or before the wheel's current time wait in a *ready* table and are
returned by the next :meth:`~TimingWheel.advance`.

Memory
------
Inside, an entry is a plain ``(task_id, fire_at_ms, scheduled_at_ms, version)`` tuple. CPython's
collector stops tracking a tuple of ints at its first collection, so a million loaded entries cost the
node's full garbage collections nearly nothing, where one ``__slots__`` object each would be walked
by every full collection. :class:`WheelEntry`, a ``NamedTuple`` over the same four fields, is built
on the way out (``advance``, ``get``, ``entries``, ``remove_where``).
``benchmarks.wheel_memory`` measures bytes per loaded task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, Final, NamedTuple

__all__ = ["TimingWheel", "WheelEntry"]

DEFAULT_LEVEL_SLOTS: Final = (256, 64, 64, 64)


class WheelEntry(NamedTuple):
    """One loaded fire: fire ``task_id`` at ``fire_at_ms`` if the task is still at
    ``(scheduled_at_ms, version)``.

    ``fire_at_ms`` is when the wheel yields the entry; it differs from ``scheduled_at_ms`` only when the
    fire was re-timed (a paced misfire, a commit retry). A value: immutable, compared and hashed by its
    fields. Each call of :meth:`TimingWheel.get` returns an equal, not the identical, object.
    """

    task_id: int
    fire_at_ms: int
    scheduled_at_ms: int
    version: int


_Item = tuple[int, int, int, int]
"""How the wheel stores an entry: WheelEntry's fields in a plain (collector-untracked) tuple."""

_Node = dict[int, Any]
"""A slot's content. Level 0: task id → item. Level L >= 1: level-(L-1) digit → level-(L-1) node."""

_TASK_ID = 0
_FIRE_AT = 1
_fire_order = itemgetter(_FIRE_AT, _TASK_ID)
_new_tuple = tuple.__new__


def _entry(item: _Item) -> WheelEntry:
    return _new_tuple(WheelEntry, item)


def _lowest_bit(bits: int) -> int:
    """Index of the lowest set bit of a positive int."""
    return (bits & -bits).bit_length() - 1


class TimingWheel:
    """Loaded entries by fire time, at most one per task, yielded by :meth:`advance` never early.

    Complexities: ``add``, ``cancel``, ``get``, ``in`` and ``len`` are O(1) (a walk of at most
    ``len(level_slots)`` small dicts). ``advance`` is O(k log k) for the k entries it returns plus
    O(levels + slots per level) for each occupied slot it enters; empty stretches cost nothing.
    ``next_due_ms`` is O(1) while cached (see there). ``remove_where`` and ``clear`` are O(n).
    Not thread-safe: one event loop owns a wheel.
    """

    def __init__(self, tick_ms: int, now_ms: int, level_slots: tuple[int, ...] = DEFAULT_LEVEL_SLOTS) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be at least 1, got {tick_ms}")
        if now_ms < 0:
            raise ValueError(f"now_ms must be a non-negative epoch instant, got {now_ms}")
        if not level_slots:
            raise ValueError("level_slots must name at least one level")
        for slots in level_slots:
            if slots < 2 or slots & (slots - 1):
                raise ValueError(f"level_slots must be powers of two >= 2, got {level_slots}")
        self._tick_ms = tick_ms
        self._now_ms = now_ms
        self._tick = now_ms // tick_ms  # current tick; every slot of an earlier tick is drained
        shifts: list[int] = []
        bits = 0
        for slots in level_slots:
            shifts.append(bits)
            bits += slots.bit_length() - 1
        self._level_slots = tuple(level_slots)
        self._shifts = tuple(shifts)  # level L's digit of a tick is (tick >> shifts[L]) & masks[L]
        self._masks = tuple(slots - 1 for slots in level_slots)
        self._top_shift = bits  # ticks sharing tick >> top_shift share a top-level block
        # level of an entry from the bit length of (its tick ^ the current tick); longer → overflow
        level_tops = [shift + mask.bit_length() for shift, mask in zip(shifts, self._masks, strict=True)]
        self._level_of_bits = tuple(
            next(level for level, level_top in enumerate(level_tops) if length <= level_top)
            for length in range(bits + 1)
        )
        self._slots: list[list[_Node]] = [[{} for _ in range(n)] for n in level_slots]
        self._occupied = [0] * len(level_slots)  # bit i of level L set iff slot i of level L is non-empty
        self._index: dict[int, _Item] = {}
        self._ready: dict[int, _Item] = {}  # fire_at_ms <= now_ms: due at the next advance
        self._overflow: dict[int, _Node] = {}  # top-level block (tick >> top_shift) → its node
        self._next_due_ms: int | None = None
        self._next_due_known = True

    # ---- reading -------------------------------------------------------------------------------

    @property
    def tick_ms(self) -> int:
        return self._tick_ms

    @property
    def now_ms(self) -> int:
        """The wheel's current time: the latest ``now_ms`` it was built or advanced with."""
        return self._now_ms

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._index

    def get(self, task_id: int) -> WheelEntry | None:
        item = self._index.get(task_id)
        return None if item is None else _new_tuple(WheelEntry, item)

    def entries(self) -> Iterator[WheelEntry]:
        """Every entry, in no particular order. A live view: do not change the wheel while iterating
        (the iterator then raises ``RuntimeError``); take a ``list`` first."""
        return map(_entry, self._index.values())

    def next_due_ms(self) -> int | None:
        """The earliest ``fire_at_ms`` in the wheel, exactly, or ``None`` when it is empty.

        Exact for every entry, near or far (overflow included); never rounded to a slot boundary.
        Cached: O(1) after ``add`` and after an ``advance`` that returned nothing; after an ``advance``
        that returned entries, a ``cancel`` or replacement of the earliest entry, or a ``remove_where``
        that took it, the next call walks to the earliest occupied leaf (O(levels × slots per level))
        and scans it: its entries share one tick, unless it is the ready table.
        """
        if not self._next_due_known:
            self._next_due_ms = self._earliest_ms()
            self._next_due_known = True
        return self._next_due_ms

    # ---- changing ------------------------------------------------------------------------------

    def add(self, task_id: int, fire_at_ms: int, scheduled_at_ms: int, version: int) -> None:
        """Load a fire, replacing the task's existing entry if any. O(1).

        ``fire_at_ms`` at or before :attr:`now_ms` is due at the next :meth:`advance`.
        """
        item = (task_id, fire_at_ms, scheduled_at_ms, version)
        index = self._index
        old = index.setdefault(task_id, item)  # one probe of the index in the common case
        if old is not item:
            self._unlink(old)
            index[task_id] = item
        if self._next_due_known and (self._next_due_ms is None or fire_at_ms < self._next_due_ms):
            self._next_due_ms = fire_at_ms
        if fire_at_ms <= self._now_ms:
            self._ready[task_id] = item
            return
        # _place, inlined: this is the loading hot path
        tick = fire_at_ms // self._tick_ms
        length = (tick ^ self._tick).bit_length()
        if length > self._top_shift:
            self._place(item, tick)
            return
        level = self._level_of_bits[length]
        shifts = self._shifts
        masks = self._masks
        position = (tick >> shifts[level]) & masks[level]
        node = self._slots[level][position]
        self._occupied[level] |= 1 << position
        while level:
            level -= 1
            digit = (tick >> shifts[level]) & masks[level]
            child = node.get(digit)
            if child is None:
                child = node[digit] = {}
            node = child
        node[task_id] = item

    def cancel(self, task_id: int) -> bool:
        """Remove the task's entry; ``True`` if there was one. O(1)."""
        item = self._index.pop(task_id, None)
        if item is None:
            return False
        self._unlink(item)
        return True

    def remove_where(self, predicate: Callable[[WheelEntry], bool]) -> int:
        """Remove every entry the predicate accepts (e.g. those of shards this node lost); the count."""
        doomed = [item for item in self._index.values() if predicate(_new_tuple(WheelEntry, item))]
        index = self._index
        for item in doomed:
            del index[item[_TASK_ID]]
            self._unlink(item)
        return len(doomed)

    def clear(self) -> None:
        """Drop every entry; the wheel keeps its current time."""
        self._slots = [[{} for _ in range(n)] for n in self._level_slots]
        self._occupied = [0] * len(self._level_slots)
        self._index = {}
        self._ready = {}
        self._overflow = {}
        self._next_due_ms = None
        self._next_due_known = True

    def advance(self, now_ms: int) -> list[WheelEntry]:
        """Move the wheel to ``now_ms``; remove and return every entry with ``fire_at_ms <= now_ms``,
        ordered by ``(fire_at_ms, task_id)``.

        Never early: an entry of the current tick whose ``fire_at_ms`` is still ahead stays. A clock
        that went back (``now_ms`` before :attr:`now_ms`) does not move the wheel; only entries that
        were added as already due and are due by ``now_ms`` too are returned.
        """
        index = self._index
        ready = self._ready
        if now_ms < self._now_ms:
            due: list[_Item] = [item for item in ready.values() if item[_FIRE_AT] <= now_ms]
            for item in due:
                del ready[item[_TASK_ID]]
                del index[item[_TASK_ID]]
            if due:
                due.sort(key=_fire_order)
                self._next_due_known = False
            return [_new_tuple(WheelEntry, item) for item in due]
        due = []
        if ready:
            due.extend(ready.values())
            ready.clear()
        target = now_ms // self._tick_ms
        tick = self._tick
        occupied = self._occupied
        mask0 = self._masks[0]
        level0 = self._slots[0]
        while True:
            bits = occupied[0] >> (tick & mask0)
            if bits:  # the next occupied tick of the current level-0 block
                slot_tick = tick + _lowest_bit(bits)
                if slot_tick > target:
                    break  # and every boundary event is later still: the block ends after slot_tick
                position = slot_tick & mask0
                slot = level0[position]
                if slot_tick < target:
                    due.extend(slot.values())
                    level0[position] = {}
                    occupied[0] &= ~(1 << position)
                    tick = slot_tick
                    continue
                fired = [item for item in slot.values() if item[_FIRE_AT] <= now_ms]
                if len(fired) == len(slot):
                    level0[position] = {}
                    occupied[0] &= ~(1 << position)
                else:
                    for item in fired:
                        del slot[item[_TASK_ID]]
                due.extend(fired)
                break
            event = self._next_boundary(tick)
            if event is None or event > target:
                break  # no occupied slot starts at or before target: jump there directly
            self._tick = event
            self._cascade(tick, event)
            tick = event
        self._tick = target
        self._now_ms = now_ms
        if not due:
            return []
        for item in due:
            del index[item[_TASK_ID]]
        due.sort(key=_fire_order)
        self._next_due_known = False
        return [_new_tuple(WheelEntry, item) for item in due]

    # ---- internals -----------------------------------------------------------------------------

    def _place(self, item: _Item, tick: int) -> None:
        """Put an entry of ``tick >= self._tick`` under its slot (levels) or its block (overflow)."""
        shifts = self._shifts
        masks = self._masks
        length = (tick ^ self._tick).bit_length()
        if length > self._top_shift:
            block = tick >> self._top_shift
            node = self._overflow.get(block)
            if node is None:
                node = self._overflow[block] = {}
            level = len(shifts)  # a block is a virtual slot above the top level
        else:
            level = self._level_of_bits[length]
            position = (tick >> shifts[level]) & masks[level]
            node = self._slots[level][position]
            self._occupied[level] |= 1 << position
        while level:
            level -= 1
            digit = (tick >> shifts[level]) & masks[level]
            child = node.get(digit)
            if child is None:
                child = node[digit] = {}
            node = child
        node[item[_TASK_ID]] = item

    def _unlink(self, item: _Item) -> None:
        """Remove an entry from its container (not from the index), pruning emptied nodes. Its place
        is recomputed from ``fire_at_ms`` and the current tick. Allocates nothing unless a leaf empties."""
        task_id, fire_at_ms = item[_TASK_ID], item[_FIRE_AT]
        if self._next_due_known and fire_at_ms == self._next_due_ms:
            self._next_due_known = False
        if fire_at_ms <= self._now_ms:
            del self._ready[task_id]
            return
        shifts = self._shifts
        masks = self._masks
        tick = fire_at_ms // self._tick_ms
        length = (tick ^ self._tick).bit_length()
        if length > self._top_shift:
            slot_level = len(shifts)
            slot = self._overflow[tick >> self._top_shift]
        else:
            slot_level = self._level_of_bits[length]
            slot = self._slots[slot_level][(tick >> shifts[slot_level]) & masks[slot_level]]
        node = slot
        level = slot_level
        while level:
            level -= 1
            node = node[(tick >> shifts[level]) & masks[level]]
        del node[task_id]
        if not node:
            self._prune(slot, slot_level, tick)

    def _prune(self, slot: _Node, slot_level: int, tick: int) -> None:
        """Drop the empty nodes on ``tick``'s path under ``slot``; free the slot if it emptied."""
        shifts = self._shifts
        masks = self._masks
        path: list[tuple[_Node, int]] = []
        node = slot
        level = slot_level
        while level:
            level -= 1
            digit = (tick >> shifts[level]) & masks[level]
            path.append((node, digit))
            node = node[digit]
        while path and not node:
            node, digit = path.pop()
            del node[digit]
        if node:
            return
        if slot_level == len(shifts):
            del self._overflow[tick >> self._top_shift]
        else:
            self._occupied[slot_level] &= ~(1 << ((tick >> shifts[slot_level]) & masks[slot_level]))

    def _next_boundary(self, tick: int) -> int | None:
        """The first tick after ``tick`` at which an occupied slot of a level >= 1, or the overflow's
        earliest block, is entered; ``None`` if there is none. Lower levels' events come first."""
        shifts = self._shifts
        levels = len(shifts)
        for level in range(1, levels):
            occupied = self._occupied[level]
            if not occupied:
                continue
            shift = shifts[level]
            current = (tick >> shift) & self._masks[level]
            bits = occupied >> (current + 1)
            if bits:
                upper = shifts[level + 1] if level + 1 < levels else self._top_shift
                return ((tick >> upper) << upper) | ((current + 1 + _lowest_bit(bits)) << shift)
        if self._overflow:
            return min(self._overflow) << self._top_shift
        return None

    def _cascade(self, old_tick: int, new_tick: int) -> None:
        """Open every occupied slot the wheel entered moving from ``old_tick`` to ``new_tick`` (a slot
        start; ``self._tick`` is already ``new_tick``): its children become the slots of the level
        below. O(slots per level), whatever the number of entries under it. Slots passed over, and the
        lower-level slots the children land in, are empty."""
        top = self._top_shift
        levels = len(self._shifts)
        if self._overflow and new_tick >> top != old_tick >> top:
            node = self._overflow.pop(new_tick >> top, None)
            if node is not None:
                self._open(node, levels - 1)
        for level in range(levels - 1, 0, -1):
            shift = self._shifts[level]
            if new_tick >> shift == old_tick >> shift:
                continue
            position = (new_tick >> shift) & self._masks[level]
            if (self._occupied[level] >> position) & 1:
                node = self._slots[level][position]
                self._slots[level][position] = {}
                self._occupied[level] &= ~(1 << position)
                self._open(node, level - 1)

    def _open(self, node: _Node, level: int) -> None:
        slots = self._slots[level]
        bits = 0
        for digit, child in node.items():
            slots[digit] = child
            bits |= 1 << digit
        self._occupied[level] |= bits

    def _earliest_ms(self) -> int | None:
        if self._ready:
            return min(item[_FIRE_AT] for item in self._ready.values())
        node: _Node | None = None
        for level, occupied in enumerate(self._occupied):
            if occupied:  # levels and, within one, slots are in fire order
                node = self._slots[level][_lowest_bit(occupied)]
                break
        else:
            if not self._overflow:
                return None
            level = len(self._shifts)
            node = self._overflow[min(self._overflow)]
        while level:
            level -= 1
            node = node[min(node)]
        earliest: int = min(item[_FIRE_AT] for item in node.values())
        return earliest
