"""The timing wheel: entries come out at or after their instant, never before, never twice, never lost."""

from __future__ import annotations

import pickle
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tjobs.firing.wheel import TimingWheel, WheelEntry

LEVELS = (256, 64, 64, 64)  # the default
T0 = 1_795_251_600_003  # an instant that is not on a tick boundary
TICK_MS = 10
TASK = 117_484_132_762_831_012  # a realistic 63-bit task id

# With 10 ms ticks and the default levels (256, 64, 64, 64), from T0 (tick 179525160000):
# level 0 holds the rest of the current 2.56 s block, level 1 of the 163.84 s block, level 2 of the
# ~2.9 h block, level 3 of the ~7.8 day block; anything later waits in the overflow.
SECOND = 1000
MINUTE = 60 * SECOND
DAY = 24 * 60 * MINUTE
OFFSETS_BY_LEVEL = {
    "level0": 7,
    "level0-same-tick": 4,
    "level1": 30 * SECOND,
    "level2": 20 * MINUTE,
    "level3": 2 * DAY,
    "overflow": 40 * DAY,
    "far-overflow": 400 * DAY,
}


def wheel(now_ms: int = T0, tick_ms: int = TICK_MS, level_slots: tuple[int, ...] = LEVELS) -> TimingWheel:
    return TimingWheel(tick_ms, now_ms, level_slots)


def in_fire_order(entries: Iterable[WheelEntry]) -> list[WheelEntry]:
    return sorted(entries, key=lambda e: (e.fire_at_ms, e.task_id))


def ids(entries: list[WheelEntry]) -> list[int]:
    return [entry.task_id for entry in entries]


# ---- firing on time ----------------------------------------------------------------------------


@pytest.mark.parametrize("offset_ms", OFFSETS_BY_LEVEL.values(), ids=OFFSETS_BY_LEVEL.keys())
def test_entry_fires_exactly_at_its_instant_after_a_jump(offset_ms: int) -> None:
    w = wheel()
    w.add(TASK, T0 + offset_ms, T0 + offset_ms, 3)

    assert w.advance(T0 + offset_ms - 1) == []
    assert TASK in w
    assert w.advance(T0 + offset_ms) == [WheelEntry(TASK, T0 + offset_ms, T0 + offset_ms, 3)]
    assert len(w) == 0


@pytest.mark.parametrize("offset_ms", OFFSETS_BY_LEVEL.values(), ids=OFFSETS_BY_LEVEL.keys())
def test_entry_fires_exactly_at_its_instant_when_approached_in_steps(offset_ms: int) -> None:
    # Given an entry at any level, when the wheel approaches it in ever smaller steps (crossing every
    # boundary on the way), it stays until its instant and comes out then.
    w = wheel()
    fire_at = T0 + offset_ms
    w.add(TASK, fire_at, fire_at, 1)
    now = T0
    while fire_at - now > 1:
        now += (fire_at - now) // 2
        assert w.advance(now) == [], f"fired early at {now}"
    assert ids(w.advance(fire_at)) == [TASK]


def test_entry_is_never_returned_early_from_the_current_tick() -> None:
    w = wheel(now_ms=1000)  # tick 100 covers 1000..1009
    w.add(1, 1007, 1007, 1)
    w.add(2, 1003, 1003, 1)

    assert w.advance(1002) == []
    assert ids(w.advance(1003)) == [2]
    assert w.advance(1006) == []
    assert ids(w.advance(1009)) == [1]


def test_ticking_through_small_levels_and_overflow_fires_each_entry_at_its_tick() -> None:
    # Levels (4, 4, 4) span 64 ticks: exercises every cascade and the overflow within a few hundred ticks.
    w = wheel(now_ms=0, tick_ms=1, level_slots=(4, 4, 4))
    instants = [1, 3, 4, 5, 15, 16, 17, 63, 64, 65, 127, 128, 200, 255, 256, 1000]
    for task_id, instant in enumerate(instants, start=1):
        w.add(task_id, instant, instant, 1)
    fired: dict[int, int] = {}
    for now in range(1, 1001):
        for entry in w.advance(now):
            fired[entry.task_id] = now
    assert fired == {task_id: instant for task_id, instant in enumerate(instants, start=1)}


# ---- cancel and replace --------------------------------------------------------------------------


@pytest.mark.parametrize("offset_ms", [-5, 0, *OFFSETS_BY_LEVEL.values()])
def test_cancel_removes_an_entry_at_any_level(offset_ms: int) -> None:
    w = wheel()
    w.add(TASK, T0 + offset_ms, T0 + offset_ms, 1)
    w.add(TASK + 1, T0 + offset_ms, T0 + offset_ms, 1)

    assert w.cancel(TASK) is True
    assert w.cancel(TASK) is False
    assert TASK not in w and w.get(TASK) is None and len(w) == 1
    assert ids(w.advance(T0 + 500 * DAY)) == [TASK + 1]


def test_cancel_of_an_unknown_task_is_false() -> None:
    assert wheel().cancel(42) is False


def test_cancel_after_the_wheel_moved_finds_an_entry_placed_long_before() -> None:
    # Given entries placed far ahead, when the wheel has moved (and cascaded) towards them, then cancel
    # still finds each one where it now is.
    w = wheel()
    for task_id, offset in enumerate(OFFSETS_BY_LEVEL.values(), start=1):
        w.add(task_id, T0 + offset, T0 + offset, 1)
    assert ids(w.advance(T0 + 20 * MINUTE - 1)) == [2, 1, 3]  # at 4 ms, 7 ms and 30 s
    for task_id in list(ids(list(w.entries()))):
        assert w.cancel(task_id)
    assert len(w) == 0
    assert w.advance(T0 + 500 * DAY) == []
    assert w.next_due_ms() is None


@pytest.mark.parametrize("first_ms", [-3, 5, 45 * SECOND, 3 * DAY, 50 * DAY])
@pytest.mark.parametrize("second_ms", [-1, 8, 40 * SECOND, 2 * DAY, 60 * DAY])
def test_add_replaces_the_tasks_entry(first_ms: int, second_ms: int) -> None:
    w = wheel()
    w.add(TASK, T0 + first_ms, T0 + first_ms, 1)
    w.add(TASK, T0 + second_ms, T0 + 1, 2)

    assert len(w) == 1
    assert w.get(TASK) == WheelEntry(TASK, T0 + second_ms, T0 + 1, 2)
    if second_ms > max(first_ms, 0):  # the old instant passes first: nothing fires then
        assert w.advance(T0 + max(first_ms, 0)) == []
    assert w.advance(T0 + 100 * DAY) == [WheelEntry(TASK, T0 + second_ms, T0 + 1, 2)]
    assert w.advance(T0 + 200 * DAY) == []


# ---- order, jumps, the past -------------------------------------------------------------------


def test_advance_returns_entries_by_fire_time_then_task_id() -> None:
    w = wheel()
    w.add(5, T0 + 30, T0 + 30, 1)
    w.add(3, T0 + 30, T0 + 30, 1)
    w.add(9, T0 - 100, T0 - 100, 1)  # overdue
    w.add(1, T0 + 5 * MINUTE, T0 + 5 * MINUTE, 1)
    w.add(7, T0 + 12, T0 + 12, 1)

    assert ids(w.advance(T0 + 10 * MINUTE)) == [9, 7, 3, 5, 1]


def test_a_long_jump_returns_everything_due_and_keeps_the_rest() -> None:
    # Given a loaded cycle, when the process was suspended for ten minutes, then one advance returns
    # every fire of those minutes, in order, and nothing after them.
    w = wheel()
    instants = [T0 + k * 997 for k in range(1, 1200)]  # ~20 minutes, every level crossed
    for task_id, instant in enumerate(instants, start=1):
        w.add(task_id, instant, instant, 1)

    due = w.advance(T0 + 10 * MINUTE)
    assert [entry.fire_at_ms for entry in due] == [i for i in instants if i <= T0 + 10 * MINUTE]
    assert len(w) == len(instants) - len(due)
    assert w.next_due_ms() == min(i for i in instants if i > T0 + 10 * MINUTE)


class CountingWheel(TimingWheel):
    """The wheel, its work in ``advance`` counted: every search for the next occupied slot above
    level 0 (``_next_boundary``) and every occupied slot opened (``_cascade``). Walking ticks one by
    one would show as work growing with the time jumped; the wheel's work follows the occupied slots.
    (How long a jump takes is measured by ``python -m benchmarks wheel``, not here.)"""

    def __init__(self, tick_ms: int = TICK_MS, now_ms: int = T0) -> None:
        super().__init__(tick_ms, now_ms, LEVELS)
        self.searches = 0
        self.cascades = 0

    def _next_boundary(self, tick: int) -> int | None:
        self.searches += 1
        return super()._next_boundary(tick)

    def _cascade(self, old_tick: int, new_tick: int) -> None:
        self.cascades += 1
        super()._cascade(old_tick, new_tick)


@pytest.mark.parametrize("jump_ms", [10 * MINUTE, 10 * DAY, 365 * DAY], ids=["10-minutes", "10-days", "a-year"])
def test_an_empty_wheel_jumps_any_distance_in_one_search(jump_ms: int) -> None:
    # 60,000 ticks of 10 ms in ten minutes, 3 billion in a year: none of them is visited.
    w = CountingWheel()
    assert w.advance(T0 + jump_ms) == []
    assert (w.searches, w.cascades) == (1, 0)  # one search finds no occupied slot; nothing to open
    assert w.now_ms == T0 + jump_ms


def _four_hourly(w: TimingWheel) -> None:
    for task_id in range(1, 200):
        w.add(task_id, T0 + task_id * 4 * 3600 * SECOND, T0, 1)


def test_a_month_long_jump_over_a_sparse_wheel_skips_empty_slots() -> None:
    # 2.6 billion 1 ms ticks: the wheel opens only slots that hold entries.
    w = CountingWheel(tick_ms=1)
    _four_hourly(w)
    due = w.advance(T0 + 30 * DAY)
    assert len(due) == 180 and len(w) == 19
    assert w.cascades <= len(LEVELS) * 199  # each entry is under at most one slot per level above 0
    assert w.searches <= w.cascades + 1  # every search but the last finds a slot to open
    # and the same month in hourly steps opens the very same slots: the work follows the occupied
    # slots, not the time jumped or the number of steps
    stepped = CountingWheel(tick_ms=1)
    _four_hourly(stepped)
    returned = sum(len(stepped.advance(T0 + hour * 3600 * SECOND)) for hour in range(1, 30 * 24 + 1))
    assert returned == 180 and stepped.cascades == w.cascades


def test_an_entry_added_in_the_past_is_due_at_the_next_advance() -> None:
    w = wheel()
    w.advance(T0 + MINUTE)
    w.add(1, T0, T0, 1)  # a minute overdue
    w.add(2, T0 + MINUTE, T0 + MINUTE, 1)  # exactly now

    assert w.next_due_ms() == T0
    assert ids(w.advance(T0 + MINUTE)) == [1, 2]


def test_an_entry_added_later_in_the_current_tick_waits_for_its_instant() -> None:
    w = wheel(now_ms=1000)
    w.advance(1002)
    w.add(1, 1008, 1008, 1)
    w.add(2, 1002, 1002, 1)

    assert ids(w.advance(1002)) == [2]
    assert w.advance(1007) == []
    assert ids(w.advance(1008)) == [1]


def test_entries_added_between_advances_behind_the_wheel_are_not_lost() -> None:
    # A commit retry re-adds at now + 500 ms while the wheel keeps ticking; a hot-path change lands
    # for an instant the wheel passed a moment ago.
    w = wheel()
    w.add(1, T0 + 100, T0 + 100, 1)
    assert ids(w.advance(T0 + 100)) == [1]
    w.add(1, T0 + 600, T0 + 100, 1)
    w.add(2, T0 + 50, T0 + 50, 4)
    assert ids(w.advance(T0 + 110)) == [2]
    assert ids(w.advance(T0 + 600)) == [1]


def test_a_clock_going_back_never_fires_future_entries() -> None:
    w = wheel()
    w.advance(T0 + 1000)
    w.add(1, T0 + 500, T0 + 500, 1)  # due
    w.add(2, T0 + 900, T0 + 900, 1)  # due
    w.add(3, T0 + 1500, T0 + 1500, 1)

    assert ids(w.advance(T0 + 600)) == [1]
    assert w.now_ms == T0 + 1000
    assert ids(w.advance(T0 + 1500)) == [2, 3]


# ---- reading and bulk changes ---------------------------------------------------------------


@pytest.mark.parametrize("earliest_ms", [-7, 3, 40 * SECOND, 30 * MINUTE, 3 * DAY, 45 * DAY])
def test_next_due_ms_is_the_exact_earliest_instant(earliest_ms: int) -> None:
    w = wheel()
    assert w.next_due_ms() is None
    w.add(1, T0 + 500 * DAY, T0, 1)
    w.add(2, T0 + earliest_ms, T0, 1)
    w.add(3, T0 + earliest_ms + 1, T0, 1)
    assert w.next_due_ms() == T0 + earliest_ms
    w.cancel(2)
    assert w.next_due_ms() == T0 + earliest_ms + 1
    w.advance(T0 + earliest_ms + 1)
    assert w.next_due_ms() == T0 + 500 * DAY


def test_remove_where_drops_matching_entries_only() -> None:
    w = wheel()
    for task_id in range(1, 101):
        w.add(task_id, T0 + task_id * 3 * MINUTE, T0, 1)
    w.add(1000, T0 - 1, T0, 1)

    assert w.remove_where(lambda entry: entry.task_id % 2 == 0) == 51
    assert len(w) == 50
    assert all(entry.task_id % 2 for entry in w.entries())
    assert ids(w.advance(T0 + 400 * MINUTE)) == list(range(1, 101, 2))


def test_clear_empties_the_wheel_and_keeps_its_time() -> None:
    w = wheel()
    for task_id, offset in enumerate([-1, *OFFSETS_BY_LEVEL.values()], start=1):
        w.add(task_id, T0 + offset, T0, 1)
    w.advance(T0 + 5)
    w.clear()
    assert len(w) == 0 and list(w.entries()) == [] and w.next_due_ms() is None
    assert w.now_ms == T0 + 5
    w.add(1, T0 + 20, T0, 1)
    assert ids(w.advance(T0 + 500 * DAY)) == [1]


def test_get_contains_len_and_entries_agree() -> None:
    w = wheel()
    w.add(1, T0 + 1, T0, 1)
    w.add(2, T0 + 2 * DAY, T0, 5)
    assert len(w) == 2 and 1 in w and 3 not in w
    assert w.get(2) == WheelEntry(2, T0 + 2 * DAY, T0, 5)
    assert sorted(ids(list(w.entries()))) == [1, 2]


def test_wheel_entry_is_a_value() -> None:
    entry = WheelEntry(TASK, T0, T0 - 1, 2)
    assert entry == WheelEntry(TASK, T0, T0 - 1, 2)
    assert entry != WheelEntry(TASK, T0, T0 - 1, 3)
    assert len({entry, WheelEntry(TASK, T0, T0 - 1, 2)}) == 1
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert repr(entry) == f"WheelEntry(task_id={TASK}, fire_at_ms={T0}, scheduled_at_ms={T0 - 1}, version=2)"
    match entry:
        case WheelEntry(task_id, fire_at_ms, _, version):
            assert (task_id, fire_at_ms, version) == (TASK, T0, 2)


@pytest.mark.parametrize(
    ("tick_ms", "now_ms", "level_slots"),
    [(0, T0, (256,)), (10, -1, (256,)), (10, T0, ()), (10, T0, (256, 60)), (10, T0, (1, 4))],
)
def test_invalid_construction_is_refused(tick_ms: int, now_ms: int, level_slots: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        TimingWheel(tick_ms, now_ms, level_slots)


# ---- against a model ----------------------------------------------------------------------------

# Magnitudes from 0 to 2**34 ms so that steps and offsets land in every level and the overflow of
# every configuration below, and long jumps happen as often as single ticks.
magnitude = st.integers(0, 34).flatmap(lambda bits: st.integers(0, 2**bits))
task_ids = st.integers(1, 40)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), task_ids, st.integers(-50, 0) | magnitude, st.integers(0, 5)),
        st.tuples(st.just("cancel"), task_ids),
        st.tuples(st.just("advance"), magnitude),
        st.tuples(st.just("back"), st.integers(0, 100)),
        st.tuples(st.just("remove_where"), st.integers(2, 5)),
        st.tuples(st.just("clear")),
    ),
    max_size=120,
)
configurations = st.sampled_from(
    [(1, (4, 4, 4)), (3, (2, 2)), (10, (256, 64, 64, 64)), (1, (8,)), (7, (16, 4)), (100, (4, 8, 2))]
)


@settings(max_examples=400, deadline=None)
@given(configuration=configurations, start=st.integers(0, 10**13), ops=operations)
def test_wheel_matches_a_sorted_list_model(
    configuration: tuple[int, tuple[int, ...]], start: int, ops: list[tuple[object, ...]]
) -> None:
    tick_ms, level_slots = configuration
    w = TimingWheel(tick_ms, start, level_slots)
    model: dict[int, WheelEntry] = {}
    now = start
    for op in ops:
        match op:
            case ("add", int(task_id), int(offset), int(version)):
                fire_at = max(now + offset, 0)
                w.add(task_id, fire_at, now, version)
                model[task_id] = WheelEntry(task_id, fire_at, now, version)
            case ("cancel", int(task_id)):
                assert w.cancel(task_id) == (model.pop(task_id, None) is not None)
            case ("advance", int(step)) | ("back", int(step)):
                target = now + step if op[0] == "advance" else max(now - step, 0)
                due = w.advance(target)
                assert due == in_fire_order(e for e in model.values() if e.fire_at_ms <= target)
                for entry in due:
                    del model[entry.task_id]
                now = max(now, target)
            case ("remove_where", int(modulus)):
                removed = w.remove_where(lambda e: e.task_id % modulus == 0)
                doomed = [task_id for task_id in model if task_id % modulus == 0]
                assert removed == len(doomed)
                for task_id in doomed:
                    del model[task_id]
            case ("clear",):
                w.clear()
                model.clear()
        assert len(w) == len(model)
        assert sorted(w.entries(), key=lambda e: e.task_id) == sorted(model.values(), key=lambda e: e.task_id)
        assert w.next_due_ms() == min((e.fire_at_ms for e in model.values()), default=None)
    # whatever happened, everything still loaded comes out, at the end of time
    assert w.advance(now + 2**40) == in_fire_order(model.values())
    assert len(w) == 0
