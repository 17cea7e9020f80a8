"""Reading the figures the rules need (:class:`tjobs.alerts.rules.Figures`), only those, once per pass.

- dead letters and service levels: every node's service-level minutes in the store (the same sums as
  ``GET /v1/slo?window=``; a node adds its minutes every ``slo.flush_s``, so they trail by about that);
- pools: the coordinator's registry (``pool_executors``: a read of what is live now);
- nodes and database servers: the coordinator's view (``/v1/cluster``);
- shard moves: the move records (``GET /v1/shards/moves``), those in progress.

A figure that cannot be read is left out and its rules are skipped this pass (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tjobs.alerts.rules import MS_PER_MINUTE, Figures, Rule, SloVerdict, dead_letter_window
from tjobs.cluster.base import Coordinator
from tjobs.errors import TjobsError
from tjobs.model import DONE
from tjobs.service.cluster_slo import cluster_service_levels
from tjobs.stores.base import TaskStore

logger = logging.getLogger(__name__)


def _skipped(what: str, error: BaseException) -> None:
    logger.warning("alerts: %s not read: %s", what, error, extra={"action": "alert_figure_unread"})


async def read_figures(rules: Sequence[Rule], store: TaskStore, coordinator: Coordinator, now_ms: int) -> Figures:
    kinds = {rule.kind for rule in rules}
    dead: dict[tuple[str | None, int], int] = {}
    slo: dict[tuple[str | None, str], SloVerdict] = {}
    pools: dict[tuple[str, str], int] = {}
    to_minute = now_ms // MS_PER_MINUTE + 1
    for rule in rules:
        try:
            if rule.kind == "dead_letters" and (key := dead_letter_window(rule)) not in dead:
                counts = await store.sum_slo_minutes(key[0], to_minute - key[1], to_minute)
                dead[key] = counts.dead
            elif rule.kind == "slo_missed" and (window := (rule.app_id, str(rule.params["window"]))) not in slo:
                slo[window] = _verdict(await cluster_service_levels(store, rule.app_id, window[1], now_ms))
            elif rule.kind == "pool_executors" and rule.app_id is not None:
                pool = (rule.app_id, str(rule.params["pool"]))
                if pool not in pools:
                    pools[pool] = len(await coordinator.pool_executors(*pool))
        except TjobsError as error:
            _skipped(f"the figures of rule {rule.id}", error)
    view = coordinator.describe()
    nodes = [(str(node["id"]), bool(node.get("healthy", True))) for node in _list(view.get("nodes"))]
    servers = [
        (str(server["server"]), bool(server["reachable"]), server.get("error"))
        for server in _list(view.get("database_servers"))
    ]
    moves: list[tuple[int, str, int]] | None = None
    if "shard_move_stuck" in kinds:
        try:
            rows = await store.read_shard_moves()
            moves = [(row.database, row.state, row.started_at_ms) for row in rows if row.state != DONE]
        except TjobsError as error:
            _skipped("the shard moves", error)
    return Figures(dead=dead, slo=slo, pools=pools, nodes=nodes, servers=servers, moves=moves)


def _list(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _verdict(report: dict[str, Any]) -> SloVerdict:
    delivery, reach = report["delivery_lateness"], report["reach"]
    return SloVerdict(bool(delivery["met"]), bool(reach["met"]), delivery.get("p99_label"), reach.get("ratio"))
