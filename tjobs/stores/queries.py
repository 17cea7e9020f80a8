"""Searches across shards: what :meth:`TaskStore.search_flows` and :meth:`TaskStore.search_tasks` take,
the order each reads a shard in, and the positions that continue a read.

Every search reads each shard in one total order, strictly after a position (the order's key of the
last item read there), so a caller can merge shards and page through them without an item twice:

- flows: newest first, ``(scheduled_at_ms, task_id)`` descending (a flow's key never changes);
- tasks: newest first, ``id`` descending (ids grow with creation time), or, with a name prefix, by
  ``(name, id)`` ascending. Names compare by code point in every store (MariaDB: the column's
  ``utf8mb4_nopad_bin``, SQLite: ``BINARY``, memory: ``str``), the order the caller merges in.

:func:`flow_rank` and :func:`task_rank` give each item's place in its order as a key that sorts
ascending; positions hold the values themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.model import Flow, FlowStatus, Task, TaskStatus
from tjobs.specs import ScheduleKind

FlowPosition = tuple[int, int]
"""``(scheduled_at_ms, task_id)`` of the last flow read: the next read returns only older ones."""

TaskPosition = tuple[str, int]
"""``(name, id)`` of the last task read: by name, the next read returns only later ones; newest first
it reads only the id (only older ids come next)."""

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)  # never stored (not encodable): skipped by the upper bound


AnswerRange = tuple[int, int]
"""The last answer's status code within ``[low, high]``; :data:`NO_ANSWER` is none at all (a timeout, a
refused connection: ``last_status_code`` is null)."""

NO_ANSWER: AnswerRange = (0, 0)


@dataclass(frozen=True, slots=True)
class FlowQuery:
    """An app's flows; every filter given must hold. ``retrying``: pending flows that were attempted
    at least once (``attempts >= 1``; with it, ``status`` is ``pending``). ``from_ms`` is inclusive,
    ``until_ms`` exclusive, both on ``scheduled_at_ms``.

    The filters past those are checked row by row within the same index range (never a range of their
    own): ``task_ids``, flows of any of these tasks (read through the primary key, only in their shards);
    ``task_name_prefix``, of a task whose name starts with it, and ``target``, of a task whose callback
    names that target (both looked up in the flow's own shard: a deleted task's flows match neither);
    ``answer``, the last answer's status code (:data:`AnswerRange`); ``changed_before_ms``, flows last
    changed before that instant (``updated_at_ms``: for a dead letter, when it died)."""

    app_id: str
    status: FlowStatus | None = None
    retrying: bool = False
    task_id: int | None = None
    from_ms: int | None = None
    until_ms: int | None = None
    task_ids: tuple[int, ...] | None = None
    task_name_prefix: str | None = None
    target: str | None = None
    answer: AnswerRange | None = None
    changed_before_ms: int | None = None

    @property
    def needs_task(self) -> bool:
        """Whether :meth:`matches` reads the flow's task."""
        return self.task_name_prefix is not None or self.target is not None

    def matches(self, flow: Flow, task: Task | None = None) -> bool:
        """``task``: the flow's task (``None``: deleted), read only when :attr:`needs_task`."""
        return (
            flow.app_id == self.app_id
            and (self.status is None or flow.status is self.status)
            and (not self.retrying or flow.attempts >= 1)
            and (self.task_id is None or flow.task_id == self.task_id)
            and (self.from_ms is None or flow.scheduled_at_ms >= self.from_ms)
            and (self.until_ms is None or flow.scheduled_at_ms < self.until_ms)
            and (self.task_ids is None or flow.task_id in self.task_ids)
            and (self.answer is None or _answered_within(flow.last_status_code, self.answer))
            and (self.changed_before_ms is None or flow.updated_at_ms < self.changed_before_ms)
            and (not self.needs_task or self._task_matches(task))
        )

    def _task_matches(self, task: Task | None) -> bool:
        return (
            task is not None
            and (self.task_name_prefix is None or task.name.startswith(self.task_name_prefix))
            and (self.target is None or self.target in task.callback.targets)
        )


def _answered_within(status_code: int | None, answer: AnswerRange) -> bool:
    if answer == NO_ANSWER:
        return status_code is None
    return status_code is not None and answer[0] <= status_code <= answer[1]


def flow_position(flow: Flow) -> FlowPosition:
    return (flow.scheduled_at_ms, flow.task_id)


def flow_rank(flow: Flow) -> tuple[int, int]:
    return (-flow.scheduled_at_ms, -flow.task_id)


def flow_after(flow: Flow, position: FlowPosition | None) -> bool:
    """``flow`` comes after ``position`` in the flows' order (strictly)."""
    return position is None or flow_position(flow) < position


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """An app's tasks; every filter given must hold. ``key`` is the exact idempotency key (one shard
    holds it); ``name_prefix`` orders the search by name."""

    app_id: str
    status: TaskStatus | None = None
    kind: ScheduleKind | None = None
    name_prefix: str | None = None
    key: str | None = None

    @property
    def by_name(self) -> bool:
        return self.name_prefix is not None

    def matches(self, task: Task) -> bool:
        return (
            task.app_id == self.app_id
            and (self.status is None or task.status is self.status)
            and (self.kind is None or task.schedule.kind is self.kind)
            and (self.name_prefix is None or task.name.startswith(self.name_prefix))
            and (self.key is None or task.key == self.key)
        )


def task_position(task: Task) -> TaskPosition:
    return (task.name, task.id)


def task_rank(query: TaskQuery, task: Task) -> tuple[str, int]:
    return (task.name, task.id) if query.by_name else ("", -task.id)


def task_after(query: TaskQuery, task: Task, position: TaskPosition | None) -> bool:
    """``task`` comes after ``position`` in ``query``'s order (strictly)."""
    if position is None:
        return True
    return task_position(task) > position if query.by_name else task.id < position[1]


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix``, so that ``prefix <= name <
    bound`` is exactly "``name`` starts with ``prefix``" (an index range); ``None`` when no string is
    above them (a prefix of U+10FFFF only)."""
    text = prefix
    while text:
        last = ord(text[-1])
        if last < _MAX_CODE_POINT:
            following = last + 1
            if following in _SURROGATES:
                following = _SURROGATES.stop
            return text[:-1] + chr(following)
        text = text[:-1]
    return None
