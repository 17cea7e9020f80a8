"""The soak's workload, in rounds: each round is an app of its own with a receiver of its own, interval
tasks firing every second across the round, a paced stream of one-shot tasks due 1.5-4 s after their
create, and a few pauses and deletes (at a moment with no fault: :meth:`Round._quiet_moment`). Rounds
follow each other without a gap (the next round's interval tasks are registered while this one fires),
so the load is steady, while each round's bookkeeping stays bounded: it is judged by
:func:`tests.chaos.accounting.account` once its instants are due, delivered and a watch period has
passed, then dropped.

A round's deadline is its last instant, or the end of the latest fault that struck by then, plus
``settle_s``: an instant owed and not delivered by then is lost.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any

from testkit.cluster_rig import NodeProc, now_ms
from tests.chaos.accounting import Figures, Promise, account
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.soak.cluster import SoakCluster
from tests.chaos.soak.evidence import evidence
from tests.chaos.soak.nemesis import Nemesis
from tests.chaos.soak.report import EXAMPLES
from tests.chaos.workload import ChaosClient, promises, read_flows, register_intervals

EVERY_MS = 1000
ONE_SHOT_LEAD_MS = (1500, 4000)
STOPS = 3  # interval tasks paused, and as many deleted, 3.5 s into each round (or at its first quiet moment)
STOP_QUIET_MS = 10_000  # ... at least this long after a fault ended


@dataclass(frozen=True)
class RoundPlan:
    index: int
    start_ms: int
    end_ms: int
    interval_tasks: int
    one_shots_per_s: float
    settle_s: float
    watch_s: float  # after every owed instant was delivered: how long to keep listening for late sends
    max_concurrency: int  # the round's app: its callbacks in flight at once, per node


def registration_lead_ms(interval_tasks: int) -> int:
    """How long before its start a round begins registering its interval tasks."""
    return 4000 + 25 * interval_tasks


@dataclass
class JudgedRound:
    plan: RoundPlan
    figures: Figures
    promises: dict[int, Promise]
    deadline_ms: int
    creates: dict[str, int]
    requests: int
    flows: int
    evidence: dict[str, list[dict[str, Any]]]  # tests/chaos/soak/evidence.py


class Round:
    """One round, run by :meth:`run`; :attr:`receiver` is readable meanwhile (the sampler's lateness)."""

    def __init__(self, cluster: SoakCluster, nemesis: Nemesis, plan: RoundPlan, seed: int) -> None:
        self.cluster = cluster
        self.nemesis = nemesis
        self.plan = plan
        self.receiver = ChaosReceiver(seed=seed)
        self.app_id = ""
        self.stops_ms: int | None = None  # when the pauses and deletes were sent (None: no quiet moment)
        self._pick = random.Random(seed)

    async def run(self, entry: NodeProc) -> JudgedRound:
        plan = self.plan
        async with self.receiver:
            client = ChaosClient(entry, self.receiver.url())
            stream: asyncio.Task[None] | None = None
            try:
                self.app_id = await client.create_app(plan.max_concurrency)
                await register_intervals(client, plan.interval_tasks, plan.start_ms, plan.end_ms, EVERY_MS)
                stream = asyncio.create_task(self._stream_one_shots(client))
                await _sleep_until(plan.start_ms + 3500)
                if await self._quiet_moment(until_ms=plan.end_ms - 10_000):
                    self.stops_ms = now_ms()
                    interval_ids = [t for t, r in client.book.tasks.items() if len(r.instants) > 1]
                    for index, task_id in enumerate(interval_ids[: 2 * STOPS]):
                        await client.stop(task_id, "pause" if index % 2 == 0 else "delete")
                await stream
                last_instant = max((max(r.instants) for r in client.book.tasks.values()), default=plan.end_ms)
                await _sleep_until(last_instant)
                fault_end_ms = await self.nemesis.settled_after(last_instant)
                deadline_ms = max(last_instant, fault_end_ms) + int(plan.settle_s * 1000)
                owed = {(p.task_id, i) for p in promises(self.cluster.rig, client.book).values() for i in p.must}
                await self._wait_delivered(owed, deadline_ms)
                await asyncio.sleep(plan.watch_s)
                flows = await asyncio.to_thread(read_flows, self.cluster.rig, self.app_id)
                book = client.book
                owed_promises = promises(self.cluster.rig, book)
                unconfirmed = promises(self.cluster.rig, book, unconfirmed=True)
                callbacks = list(self.receiver.callbacks)
                figures = await asyncio.to_thread(
                    lambda: account(
                        owed_promises,
                        callbacks,
                        flows,
                        deadline_ms=deadline_ms,
                        unanswered_creates=book.unanswered_creates,
                        unconfirmed=unconfirmed,
                    )
                )
                creates = {
                    "acknowledged": len(book.tasks),
                    "unanswered": book.unanswered_creates,
                    "refused": book.refused_creates,
                    "storage_unavailable": book.unavailable_creates,
                    "outcome_unknown": len(book.unconfirmed),
                    "ids_named_twice": len(book.named_twice),
                }
                kept = evidence(figures, callbacks, flows, EXAMPLES, {**unconfirmed, **owed_promises})
                kept["named_twice"] = [dataclasses.asdict(again) for again in book.named_twice[:EXAMPLES]]
                return JudgedRound(plan, figures, owed_promises, deadline_ms, creates, len(callbacks), len(flows), kept)
            finally:
                if stream is not None and not stream.done():  # the round failed: no create after the close
                    stream.cancel()
                    await asyncio.gather(stream, return_exceptions=True)
                await client.close()

    async def _quiet_moment(self, until_ms: int) -> bool:
        """Wait until no fault runs and the last one ended :data:`STOP_QUIET_MS` ago; False if not by
        ``until_ms``. A pause or delete owes the instants due a second before it was sent, which a healthy
        owner has fired by then; one frozen, cut off or killed has not, and the pause rightly cancels them."""
        while now_ms() < until_ms:
            quiet_ms = self.nemesis.quiet_for_ms()
            if quiet_ms is not None and quiet_ms >= STOP_QUIET_MS:
                return True
            await asyncio.sleep(0.5)
        return False

    async def _stream_one_shots(self, client: ChaosClient) -> None:
        """``one_shots_per_s`` creates a second, paced per 100 ms, from the round's start until 4 s before
        its end (so every one is due within the round)."""
        plan = self.plan
        if plan.one_shots_per_s <= 0:
            return
        pending: set[asyncio.Task[int | None]] = set()
        await _sleep_until(plan.start_ms)
        owed = 0.0
        tick_s = 0.1
        next_tick = now_ms()
        try:
            while now_ms() < plan.end_ms - ONE_SHOT_LEAD_MS[1]:
                owed += plan.one_shots_per_s * tick_s
                for _ in range(math.floor(owed)):
                    at_ms = now_ms() + self._pick.randint(*ONE_SHOT_LEAD_MS)
                    task = asyncio.create_task(client.create_at(at_ms))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                owed -= math.floor(owed)
                next_tick += int(tick_s * 1000)
                await _sleep_until(next_tick)
            if pending:
                await asyncio.gather(*pending)
        finally:  # cancelled (its round failed): its creates in flight end with it
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _wait_delivered(self, owed: set[tuple[int, int]], deadline_ms: int) -> None:
        """Until every owed instant had a 2xx reply, or the deadline."""
        missing = set(owed)
        seen = 0
        while missing and now_ms() < deadline_ms:
            callbacks = self.receiver.callbacks
            for callback in callbacks[seen:]:
                if callback.delivered:
                    missing.discard((callback.task_id, callback.scheduled_at_ms))
            seen = len(callbacks)
            await asyncio.sleep(0.5)


async def _sleep_until(epoch_ms: int) -> None:
    wait_ms = epoch_ms - now_ms()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)
