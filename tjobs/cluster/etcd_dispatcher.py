"""The dispatcher of the etcd coordinator: the leader election and the plan it publishes.

A healthy node finding no ``leader`` key takes it (create-if-absent, on its lease); an unhealthy leader
deletes it so that a healthy node dispatches. The leader re-packs (:func:`tjobs.cluster.plan.pack`) when
membership or health changed and at every cycle, by the shards' loads (counted in the background), and
publishes the plan with a compare-and-set on its revision, while the leader key still names it. A
member record saying its node cannot reach a server whose shards it holds, while another node reaches
it, re-packs at once (:mod:`tjobs.cluster.reachability`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aetcd

from tjobs.clock import Clock
from tjobs.cluster.etcd_view import ClusterView
from tjobs.cluster.plan import Member, needs_replan, pack
from tjobs.cluster.reachability import Reach
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)


class EtcdDispatcher:
    def __init__(
        self,
        *,
        node_id: str,
        shard_count: int,
        cycle_ms: int,
        store: TaskStore,
        clock: Clock,
        loads: Callable[[], Awaitable[dict[int, int]]] | None,
        client: Callable[[], aetcd.Client],
        key: Callable[[str], bytes],
        healthy: Callable[[], bool],
        lease_id: Callable[[], int | None],
    ) -> None:
        self.node_id = node_id
        self.shard_count = shard_count
        self.cycle_ms = cycle_ms
        self._store = store
        self._clock = clock
        self._loads_source = loads or self._count_active
        self._etcd = client
        self._key = key
        self._healthy = healthy
        self._lease_id = lease_id
        self._last_plan_ms = 0
        self._loads: dict[int, int] = {}
        self._loads_task: asyncio.Task[None] | None = None
        self.is_leader = False

    def cancel(self) -> None:
        """Stop the load count in progress, if any."""
        if self._loads_task is not None:
            self._loads_task.cancel()

    async def lead(self, view: ClusterView) -> None:
        client = self._etcd()
        if view.leader is None and self._healthy():
            won, _ = await client.transaction(
                compare=[client.transactions.create(self._key("leader")) == 0],
                success=[client.transactions.put(self._key("leader"), self.node_id.encode(), lease=self._lease_id())],
                failure=[],
            )
            if won:
                logger.info("elected dispatcher leader", extra={"action": "leader_elected"})
                view.leader = self.node_id
        was_leader = self.is_leader
        self.is_leader = view.leader == self.node_id
        if not self.is_leader:
            return
        if not self._healthy():
            await client.delete(self._key("leader"))  # let a healthy node dispatch
            self.is_leader = False
            return
        if not was_leader:
            self._last_plan_ms = view.plan.created_at_ms if view.plan is not None else 0
            self._refresh_loads()
        live = [
            Member(node, str(m.get("zone", "")), str(m.get("address", "")))
            for node, m in view.members.items()
            if view.available(node)
        ]
        now_ms = self._clock.now_ms()
        cycle_due = now_ms - self._last_plan_ms >= self.cycle_ms
        live_ids = [m.node_id for m in live]
        reach = Reach.from_members({node: view.members[node] for node in live_ids}, self._server_of(), now_ms)
        misplaced = view.plan is not None and reach.misplaced(
            ((g.primary, g.shards) for g in view.plan.groups), live_ids
        )
        if not live or not (needs_replan(view.plan, live, self.shard_count) or cycle_due or misplaced):
            return
        if cycle_due:
            self._refresh_loads()
        previous = view.plan
        version = (previous.version if previous is not None else 0) + 1
        plan = pack(
            previous,
            live,
            self.shard_count,
            self._loads,
            version=version,
            now_ms=now_ms,
            leader=self.node_id,
            reach=reach,
        )
        if previous is not None and plan.groups == previous.groups:
            self._last_plan_ms = now_ms  # nothing to move this cycle
            return
        compare = (
            client.transactions.mod(self._key("plan")) == view.plan_revision
            if view.plan is not None
            else client.transactions.create(self._key("plan")) == 0
        )
        published, _ = await client.transaction(
            compare=[compare, client.transactions.value(self._key("leader")) == self.node_id.encode()],
            success=[client.transactions.put(self._key("plan"), json.dumps(plan.to_json()).encode())],
            failure=[],
        )
        if published:
            self._last_plan_ms = now_ms
            view.plan = plan
            if misplaced:
                cut_off = {node: sorted(servers) for node, servers in reach.down.items() if servers}
                logger.warning(
                    "re-packed at once: shards of a server moved off nodes that cannot reach it (%s)",
                    ", ".join(f"{node}: {' '.join(servers)}" for node, servers in sorted(cut_off.items())),
                    extra={"action": "jobs_moved_off_unreachable_server", "plan_version": plan.version},
                )
            logger.info(
                "published plan v%d: %d groups over %d nodes",
                plan.version,
                len(plan.groups),
                len(live),
                extra={"action": "jobs_rebalanced", "plan_version": plan.version},
            )

    def _server_of(self) -> dict[int, str]:
        return {shard: self._store.server_of_shard(shard) for shard in range(self.shard_count)}

    def _refresh_loads(self) -> None:
        if self._loads_task is not None and not self._loads_task.done():
            return

        async def refresh() -> None:
            try:
                self._loads = await self._loads_source()
            except Exception as error:
                logger.warning(
                    "shard load estimate failed (%s); packing by count",
                    error,
                    extra={"action": "load_estimate_failed"},
                )

        self._loads_task = asyncio.create_task(refresh(), name="tjobs-load-estimate")

    async def _count_active(self) -> dict[int, int]:
        loads: dict[int, int] = {}
        for shard in range(self.shard_count):
            loads[shard] = await self._store.count_active(shard)
        return loads
