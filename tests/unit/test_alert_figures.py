"""What the alert pass reads: only the figures its rules need, from the store and the coordinator; a
figure it cannot read is left out (its rules skip the pass); and it acts only on the dispatcher leader."""

from __future__ import annotations

import pytest

from tjobs.alerts.evaluator import AlertEvaluator, leads
from tjobs.alerts.figures import read_figures
from tjobs.alerts.rules import Rule, evaluate, parse_rule
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.allow_list import AllowList
from tjobs.errors import StorageUnavailable
from tjobs.model import SloCounts, SloMinute
from tjobs.pools.model import Executor
from tjobs.stores.contracts import MoveRow
from tjobs.stores.contracts.alerts import AlertSetting
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.memory_alerts import MemoryAlertSettings

pytestmark = pytest.mark.asyncio

NOW = 1_800_000_000_000


def rule(kind: str, app_id: str | None = None, **params: object) -> Rule:
    return parse_rule("rule_0", app_id, {"name": "r", "kind": kind, "params": params})


class ClusterView(LocalCoordinator):
    """A cluster member's view: two nodes (one unhealthy), two database servers (one silent)."""

    leader = False

    def describe(self) -> dict[str, object]:
        return {
            "mode": "cluster",
            "is_leader": self.leader,
            "nodes": [{"id": "n1", "healthy": True}, {"id": "n2", "healthy": False}],
            "database_servers": [
                {"server": "db1:3306", "reachable": True, "error": None},
                {"server": "db2:3306", "reachable": False, "error": "connection refused"},
            ],
        }


class MovingStore(MemoryTaskStore):
    async def read_shard_moves(self) -> list[MoveRow]:
        return [
            MoveRow(3, "db1:3306", "db2:3306", "copying", 1, 0, started_at_ms=NOW - 90 * 60_000),
            MoveRow(4, "db1:3306", "db2:3306", "done", 1, 2, started_at_ms=NOW - 900 * 60_000),
        ]


class SilentStore(MemoryTaskStore):
    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        raise StorageUnavailable("the apps database does not answer")


async def test_the_figures_come_from_the_store_and_the_coordinator() -> None:
    store = MovingStore()
    coordinator = ClusterView(store.topology.shard_count, "n1")
    await store.add_slo_minutes("n1", [SloMinute("a", NOW // 60_000 - 2, SloCounts(dead=4))])
    await store.add_slo_minutes("n1", [SloMinute("a", NOW // 60_000 - 9, SloCounts(dead=100))])  # before 5 min
    await coordinator.register_executor("a", "workers", Executor("e1", "http://10.0.0.1:80"))
    rules = [
        rule("dead_letters", "a", threshold=3),
        rule("pool_executors", "a", pool="workers", min_executors=2),
        rule("node_down", min_nodes=2),
        rule("database_unhealthy"),
        rule("shard_move_stuck", max_minutes=60),
    ]
    figures = await read_figures(rules, store, coordinator, NOW)
    assert figures.dead == {("a", 5): 4}
    assert figures.pools == {("a", "workers"): 1}
    assert figures.moves == [(3, "copying", NOW - 90 * 60_000)]  # the finished move is not in progress
    subjects = [[f.subject for f in evaluate(r, figures, NOW) or []] for r in rules]
    assert subjects == [["dead_letters"], ["pool:workers"], ["node:n2", "nodes"], ["server:db2:3306"], ["move:3"]]


async def test_a_figure_that_cannot_be_read_is_left_out_and_its_rule_knows_nothing() -> None:
    store = SilentStore()
    the_rule = rule("dead_letters", "a", threshold=1)
    figures = await read_figures([the_rule], store, LocalCoordinator(store.topology.shard_count), NOW)
    assert figures.dead == {} and figures.moves is None  # no move rule: the moves are not read
    assert evaluate(the_rule, figures, NOW) is None


async def test_only_the_dispatcher_leader_evaluates() -> None:
    store, alerts = MemoryTaskStore(), MemoryAlertSettings()
    await alerts.put_alert_setting(AlertSetting("rule", "rule_1", None, rule("database_unhealthy").document(), 1, 1))
    coordinator = ClusterView(store.topology.shard_count, "n1")
    assert leads(LocalCoordinator(4))  # the embedded node is its own leader

    async def allow(app_id: str) -> AllowList:
        return AllowList.parse([])

    class Clock:
        def now_ms(self) -> int:
            return NOW

    evaluator = AlertEvaluator(alerts, store, coordinator, None, Clock(), allow, 60)  # type: ignore[arg-type]
    assert not leads(coordinator)
    assert await evaluator.run_once() == 0
    assert await alerts.read_alert_states() == [] and evaluator.last_pass_ms is None
    coordinator.leader = True
    assert await evaluator.run_once() == 0  # a rule without channels: its state is kept, nothing is sent
    (state,) = await alerts.read_alert_states()
    assert (state.subject, state.status) == ("server:db2:3306", "firing")
