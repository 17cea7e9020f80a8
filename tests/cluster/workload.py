"""A workload of one-shot tasks over a time window, and the accounting that proves 0 lost, 0 duplicate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sharding import shard_of_task_id
from tjobs.testing.cluster_rig import Api, ClusterRig, NodeProc, created_ms, now_ms


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


async def collect(api: Api, via: NodeProc, tasks: dict[int, int]) -> Outcome:
    slots = asyncio.Semaphore(16)
    outcome = Outcome()

    async def one(task_id: int) -> None:
        async with slots:
            outcome.flows[task_id] = await api.flows(via, task_id)

    await asyncio.gather(*(one(task) for task in tasks))
    return outcome


async def settle(tasks: dict[int, int], after_last_ms: int) -> None:
    wait_ms = max(tasks.values()) + after_last_ms - now_ms()
    if wait_ms > 0:
        await asyncio.sleep(wait_ms / 1000)


def in_shards(tasks: dict[int, int], shards: set[int]) -> dict[int, int]:
    return {task: at for task, at in tasks.items() if shard_of_task_id(task) in shards}
