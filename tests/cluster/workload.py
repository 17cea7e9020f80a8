"""A workload of one-shot tasks over a time window, and the accounting that proves 0 lost, 0 duplicate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sharding import shard_of_task_id
from testkit.cluster_rig import Api, ClusterRig, NodeProc, created_ms, now_ms
from tjobs.model import FlowStatus


@dataclass
class Outcome:
    flows: dict[int, list[dict[str, object]]] = field(default_factory=dict)

    @property
    def lost(self) -> list[int]:
        return [task for task, flows in self.flows.items() if not flows]

    @property
    def duplicated(self) -> list[int]:
        return [task for task, flows in self.flows.items() if len(flows) > 1]

    def fired_at(self, task_id: int) -> int:
        return created_ms(self.flows[task_id][0])


async def start_cluster(rig: ClusterRig, api: Api, count: int) -> dict[str, object]:
    for index in range(1, count + 1):
        rig.start(index)
    for node in rig.live():
        await api.wait_healthy(node)
    view = await api.wait_stable(count)
    await api.create_app(rig.nodes[1])
    return view


async def schedule(api: Api, via: NodeProc, url: str, start_ms: int, end_ms: int, every_ms: int) -> dict[int, int]:
    """One ``at`` task per ``every_ms`` in [start, end): task id -> instant."""
    slots = asyncio.Semaphore(16)
    instants = list(range(start_ms, end_ms, every_ms))

    async def one(at_ms: int) -> tuple[int, int]:
        async with slots:
            return await api.create_at(via, at_ms, url), at_ms

    return dict(await asyncio.gather(*(one(at) for at in instants)))


async def settle(tasks: dict[int, int], after_last_ms: int) -> None:
    wait_ms = max(tasks.values()) + after_last_ms - now_ms()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)


async def collect_when_fired(
    api: Api, via: NodeProc, tasks: dict[int, int], after_last_ms: int, poll_s: float = 0.5
) -> Outcome:
    """The flows of every task, read once every task has a flow and all its flows are terminal (the
    callback answered or given up), or once ``after_last_ms`` past the last instant passed, whichever
    comes first: the same bound as sleeping until then and reading, without sleeping it out when
    everything fired sooner. Reads every task after the last instant, then again only those not done.
    (A task read done is not read again: an ``at`` task has one instant, and the flows' primary key
    (task, instant) leaves no room for a second flow of it.)"""
    deadline_ms = max(tasks.values()) + after_last_ms
    await settle(tasks, 0)  # nothing can be done before the last instant
    slots = asyncio.Semaphore(16)
    outcome = Outcome()

    async def done(task_id: int) -> bool:
        async with slots:
            flows = await api.flows(via, task_id)
        outcome.flows[task_id] = flows
        return bool(flows) and all(FlowStatus(flow["status"]).terminal for flow in flows)

    pending = sorted(tasks)
    while True:
        answers = await asyncio.gather(*(done(task_id) for task_id in pending))
        pending = [task_id for task_id, finished in zip(pending, answers, strict=True) if not finished]
        if not pending or now_ms() >= deadline_ms:
            return outcome
        await asyncio.sleep(min(poll_s, max(deadline_ms - now_ms(), 0) / 1000))


def in_shards(tasks: dict[int, int], shards: set[int]) -> dict[int, int]:
    return {task: at for task, at in tasks.items() if shard_of_task_id(task) in shards}
