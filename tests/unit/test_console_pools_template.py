"""The console's pools page rendered alone (no node, no browser): each executor's last heartbeat and lease
expiry as ages and UTC instants, its callbacks in flight, the empty-pool warning, and escaping."""

from __future__ import annotations

from typing import Any

from tjobs.console.context import Principal, _templates
from tjobs.console.durations import duration
from tjobs.model import App
from tjobs.pools.model import Executor
from tjobs.service.pools import EmptyPool, ExecutorState, PoolsState

APP = App(id="app_1", name="shop", api_key_hash="x", secrets=["s"])
NOW_MS = 1_780_000_000_000  # 2026-05-28 20:26:40 UTC


def render(**context: Any) -> str:
    principal = Principal(APP, "token")
    html: str = (
        _templates()
        .get_template("pools.html")
        .render(
            principal=principal, csrf="token", path="/console/pools", node_id="n1", scoped=APP, choices=[], **context
        )
    )
    return html


def test_each_executor_shows_its_heartbeat_age_lease_left_and_in_flight_and_empty_pools_are_warned_about() -> None:
    executor = Executor("w-<1>", "http://10.0.0.7:9001/", "eu-1", weight=2, capacity=8, ttl_s=10)
    state = PoolsState(
        pools={"workers": [ExecutorState(executor, NOW_MS - 2_500, NOW_MS + 7_500, 3)]},
        empty=[EmptyPool(APP.id, "reports", NOW_MS - 65_000, 6, ["n1", "n2"])],
        figures_at_ms=NOW_MS - 4_000,
        nodes=["n1", "n2"],
    )

    html = render(state=state, now_ms=NOW_MS)

    assert "2.5 s ago" in html and "2026-05-28 20:26:37.500" in html  # the last heartbeat: age and instant
    assert "in 7.5 s" in html and "(TTL 10 s)" in html
    assert '<td data-label="In flight">3</td>' in html
    assert "the oldest 4.0 s ago" in html
    assert "Pool <strong>reports</strong> has no live executor: flows found it empty 1 min 05 s ago" in html
    assert "6 attempts on n1, n2" in html
    assert "w-&lt;1&gt;" in html and "w-<1>" not in html


def test_an_app_without_pools_says_so() -> None:
    html = render(state=PoolsState({}, [], None), now_ms=NOW_MS)

    assert "No pool of this app has a live executor" in html and 'role="alert"' not in html


def test_durations_are_written_for_people() -> None:
    assert [duration(ms) for ms in (None, -5, 850, 12_500, 45_000, 185_000, 7_800_000, 200_000_000)] == [
        "—", "0 ms", "850 ms", "12 s", "45 s", "3 min 05 s", "2 h 10 min", "2 d 7 h"
    ]  # fmt: skip
