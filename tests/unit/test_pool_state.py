"""What an operator reads of an app's pools (:class:`tjobs.service.pools.PoolService`, one source for
``GET /v1/pools/{pool}`` and the console): each executor's last heartbeat and lease expiry as instants,
the callbacks every node has in flight to it (summed from the nodes' published figures), and the
empty-pool warning: a pool where a flow found no live executor recently and which has none now."""

from __future__ import annotations

from typing import Any

import pytest

from tjobs.clock import ManualClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.ssrf import TargetGuard
from tjobs.errors import NotFound
from tjobs.model import App
from tjobs.pools.model import Executor
from tjobs.service.node_figures import NodeFigures, starved_pools
from tjobs.service.pools import PoolService
from tjobs.settings import LimitSettings

NOW_MS = 1_780_000_000_000
APP = App(id="app_1", name="shop", api_key_hash="x", secrets=["s"])
OTHER = App(id="app_2", name="other", api_key_hash="y", secrets=["s"])


class _Monotonic:
    def __init__(self) -> None:
        self.now_s = 50.0

    def __call__(self) -> float:
        return self.now_s


class _OtherNode(LocalCoordinator):
    """The embedded coordinator with a second node's published record beside this one's."""

    other: dict[str, Any] | None = None

    async def node_figures(self) -> dict[str, dict[str, Any]]:
        mine = await super().node_figures()
        return mine if self.other is None else {**mine, "n2": self.other}


def _service() -> tuple[PoolService, _OtherNode, _Monotonic, dict[str, Any]]:
    monotonic = _Monotonic()
    coordinator = _OtherNode(4, "n1", monotonic_s=monotonic)
    snapshot: dict[str, Any] = {"pools": {"in_flight": [], "starved": []}}
    clock = ManualClock(NOW_MS)
    figures = NodeFigures("n1", coordinator, lambda: snapshot, clock)
    return PoolService(coordinator, TargetGuard(), LimitSettings(), clock, figures), coordinator, monotonic, snapshot


async def test_each_executor_shows_its_last_heartbeat_its_lease_expiry_and_its_callbacks_in_flight() -> None:
    service, coordinator, monotonic, snapshot = _service()
    await coordinator.register_executor(APP.id, "workers", Executor("w-1", "http://10.0.0.1", ttl_s=10))
    await coordinator.register_executor(APP.id, "workers", Executor("w-2", "http://10.0.0.2", ttl_s=30))
    monotonic.now_s += 3
    await coordinator.renew_executor(APP.id, "workers", "w-1")
    monotonic.now_s += 1
    snapshot["pools"]["in_flight"] = [[APP.id, "workers", "w-1", 2], [OTHER.id, "workers", "w-1", 5]]
    coordinator.other = {"published_at_ms": NOW_MS - 4_000, "pools": {"in_flight": [[APP.id, "workers", "w-1", 3]]}}

    w1, w2 = await service.pool_state(APP, "workers")
    assert (w1.executor.id, w1.last_heartbeat_ms, w1.lease_expires_at_ms, w1.in_flight) == (
        "w-1", NOW_MS - 1_000, NOW_MS + 9_000, 5  # this node's 2 and the other node's 3; not app_2's
    )  # fmt: skip
    assert (w2.last_heartbeat_ms, w2.lease_expires_at_ms, w2.in_flight) == (NOW_MS - 4_000, NOW_MS + 26_000, 0)
    with pytest.raises(NotFound):
        await service.pool_state(OTHER, "workers")  # another app's pool: no such pool
    with pytest.raises(NotFound):
        await service.pool_state(APP, "Not A Pool")


async def test_a_pool_flows_found_empty_is_warned_about_until_an_executor_is_live_in_it() -> None:
    service, coordinator, _, snapshot = _service()
    snapshot["pools"]["starved"] = [[APP.id, "reports", NOW_MS - 60_000, 4], [OTHER.id, "reports", NOW_MS, 1]]
    coordinator.other = {
        "published_at_ms": NOW_MS - 2_000,
        "pools": {"starved": [[APP.id, "reports", NOW_MS - 5_000, 2]]},
    }
    await coordinator.register_executor(APP.id, "workers", Executor("w-1", "http://10.0.0.1"))

    state = await service.app_state(APP)
    assert list(state.pools) == ["workers"] and state.nodes == ["n1", "n2"]
    assert state.figures_at_ms == NOW_MS - 2_000  # the oldest node's publication
    (empty,) = state.empty
    assert (empty.app_id, empty.pool, empty.last_ms, empty.attempts, empty.nodes) == (
        APP.id, "reports", NOW_MS - 5_000, 6, ["n1", "n2"]
    )  # fmt: skip
    assert [e.app_id for e in await service.empty_pools({APP.id, OTHER.id})] == [OTHER.id, APP.id]  # newest first

    await coordinator.register_executor(APP.id, "reports", Executor("r-1", "http://10.0.0.3"))
    assert (await service.app_state(APP)).empty == []
    assert await service.empty_pools({APP.id}) == []


def test_starved_pools_merge_the_nodes_records_and_skip_malformed_entries() -> None:
    records: dict[str, dict[str, Any]] = {
        "n1": {"pools": {"starved": [["a", "p", 10, 1], ["b", "p", 30, 1], ["bad"]]}},
        "n2": {"pools": {"starved": [["a", "p", 20, 2]]}},
        "n3": {},
    }
    assert starved_pools(records, {"a"}) == {("a", "p"): {"last_ms": 20, "attempts": 3, "nodes": ["n1", "n2"]}}
    assert set(starved_pools(records)) == {("a", "p"), ("b", "p")}
