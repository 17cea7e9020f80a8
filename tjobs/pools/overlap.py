"""The overlap policy of a task routed to a pool: what a fire does while the task's previous flow still runs.

``callback.pool.overlap`` (:class:`tjobs.specs.pool.Overlap`, XXL-JOB's block strategy):

- ``allow`` (default): every fire is delivered as it comes;
- ``skip_if_running``: a fire whose task still has a flow running on this node ends ``skipped``
  (``last_error`` names the running flow), nothing sent;
- ``queue_one``: it waits until the running flow ends, then goes; while one waits, a further fire
  is skipped.

"Running" is the deliverer's view on the node that fires the task (a task's fires all come from the
node owning its shard): queued, in an attempt, or waiting in memory for its retry. A flow whose retry
was left to the compensator (due far ahead) is not running here, and a queued fire goes once the
running flow ends on this node (a re-drive of it, too), or once this node leaves a flow of a shard it
does not own to that owner's compensator (:mod:`tjobs.delivery.foreign_flows`). A flow this node sent
that its executor accepted as a job run runs until the run ends, wherever its end was written
(:mod:`tjobs.delivery.run_watch`); a node that takes a shard over learns the shard's live runs first,
so they hold the gate there too.
:class:`OverlapGate` is pure bookkeeping; the deliverer asks it in ``submit`` and tells it in ``_finish``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Generic, TypeVar

from tjobs.specs.pool import Overlap

T = TypeVar("T")


class Verdict(StrEnum):
    GO = "go"
    SKIP = "skip"
    WAIT = "wait"


class OverlapGate(Generic[T]):
    """Per task: the flows running, and at most one fire waiting (with what to resume it by)."""

    def __init__(self) -> None:
        self._running: dict[int, set[str]] = {}
        self._waiting: dict[int, tuple[str, T]] = {}

    def admit(
        self, task_id: int, flow_id: str, policy: Overlap, waiter: T, still_running: Callable[[str], bool]
    ) -> tuple[Verdict, str | None]:
        """Whether ``flow_id`` may go now, must be skipped, or waits (then ``waiter`` is kept for
        :meth:`finished`); with the flow it yields to. ``still_running`` prunes flows that left without
        finishing."""
        running = {f for f in self._running.get(task_id, set()) if f != flow_id and still_running(f)}
        if running and policy is not Overlap.ALLOW:
            blocking = min(running)
            if policy is Overlap.QUEUE_ONE and task_id not in self._waiting:
                self._waiting[task_id] = (flow_id, waiter)
                self._running[task_id] = running
                return Verdict.WAIT, blocking
            return Verdict.SKIP, blocking
        running.add(flow_id)
        self._running[task_id] = running
        return Verdict.GO, None

    def skips(self, task_id: int, flow_id: str, policy: Overlap, still_running: Callable[[str], bool]) -> bool:
        """Whether :meth:`admit` would skip ``flow_id`` now, as far as this gate knows (changes nothing)."""
        running = any(f != flow_id and still_running(f) for f in self._running.get(task_id, ()))
        return running and (policy is Overlap.SKIP_IF_RUNNING or task_id in self._waiting)

    def hold(self, task_id: int, flow_id: str) -> None:
        """``flow_id`` runs for its task (a live run another node started, learned at a take-over)."""
        self._running.setdefault(task_id, set()).add(flow_id)

    def forget(self, lost: Callable[[int], bool]) -> list[T]:
        """Drop what is known of the tasks for which ``lost(task_id)`` (their shard is another node's):
        their running flows, and their waiting fires, returned."""
        dropped = [waiter for task_id, (_, waiter) in self._waiting.items() if lost(task_id)]
        self._waiting = {task_id: waiting for task_id, waiting in self._waiting.items() if not lost(task_id)}
        self._running = {task_id: running for task_id, running in self._running.items() if not lost(task_id)}
        return dropped

    def finished(self, task_id: int, flow_id: str) -> T | None:
        """``flow_id`` ended: the waiter to resume now (it counts as running from here), if any."""
        running = self._running.get(task_id)
        if running is None:
            return None
        running.discard(flow_id)
        waiting = self._waiting.get(task_id)
        if waiting is not None and not running:
            del self._waiting[task_id]
            running.add(waiting[0])
            return waiting[1]
        if not running and waiting is None:
            del self._running[task_id]
        return None
