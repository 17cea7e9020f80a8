"""``sharded`` routing: ``total`` items spread over the live executors, even and stable (pure).

:func:`assign_items` takes the previous assignment (item -> executor id) and the executors live now,
and answers the new one:

- **even**: every live executor holds ``total // n`` or ``total // n + 1`` items (``n`` live executors;
  with more executors than items, some hold none);
- **stable**: an item keeps its executor while that executor is live and does not hold more than its
  share; it moves only when its holder left or the split became uneven (an executor joined, so the
  others give up their surplus), and then as few items move as evenness allows;
- **deterministic**: the same previous assignment and live set give the same answer on every node
  (ties go by executor id, then by item index).

``tests/unit/test_pool_sharding.py`` holds these as properties (hypothesis).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Assignment = dict[int, str]


def assign_items(previous: Mapping[int, str], live: Sequence[str], total: int) -> Assignment:
    """Items ``0..total-1`` over ``live`` executor ids (see the module docstring); empty if none is live."""
    if total <= 0 or not live:
        return {}
    executors = sorted(set(live))
    count = len(executors)
    base, extra = divmod(total, count)
    kept: dict[str, list[int]] = {executor: [] for executor in executors}
    for item in range(total):
        holder = previous.get(item)
        if holder in kept:
            kept[holder].append(item)
    # The `extra` executors allowed one more item are those already holding the most: fewest moves.
    by_holding = sorted(executors, key=lambda executor: (-len(kept[executor]), executor))
    quota = {executor: base + (1 if rank < extra else 0) for rank, executor in enumerate(by_holding)}
    assignment: Assignment = {}
    free: list[int] = []
    for executor in executors:
        items = kept[executor]
        for item in items[: quota[executor]]:
            assignment[item] = executor
        free.extend(items[quota[executor] :])
    free.extend(item for item in range(total) if previous.get(item) not in kept)
    free.sort()
    position = 0
    for executor in executors:
        room = quota[executor] - len(kept[executor][: quota[executor]])
        for item in free[position : position + room]:
            assignment[item] = executor
        position += room
    return assignment


def items_of(assignment: Mapping[int, str], executor_id: str) -> list[int]:
    return sorted(item for item, holder in assignment.items() if holder == executor_id)
