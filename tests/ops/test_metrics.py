"""The node's metrics: names, units and labels an operator's dashboards and alerts rely on."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from tjobs.clock import ManualClock
from tjobs.observability.metrics import Metrics, status_class
from tjobs.observability.observer import MetricsObserver
from tjobs.observability.slo import ServiceLevels
from tjobs.specs import CallbackSpec, IntervalSpec

if TYPE_CHECKING:
    from tjobs.node import Node


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_every_metric_has_the_tjobs_prefix_and_no_task_id_label() -> None:
    metrics = Metrics()
    metrics.observe_fire("shop", 0.2)
    metrics.observe_attempt("shop", "delivered", 204, 0.01)
    for family in text_string_to_metric_families(metrics.render().decode()):
        assert family.name.startswith("tjobs_")
        for s in family.samples:
            assert "task_id" not in s.labels and "task" not in s.labels


def test_committed_fire_counts_and_observes_lateness_per_app() -> None:
    metrics = Metrics()
    metrics.observe_fire("shop", 0.2)
    metrics.observe_fire("shop", 2.0)
    got = samples(metrics)
    assert got[("tjobs_fires_total", (("app", "shop"), ("outcome", "committed")))] == 2
    assert got[("tjobs_fire_lateness_seconds_bucket", (("app", "shop"), ("le", "0.25")))] == 1
    assert got[("tjobs_fire_lateness_seconds_count", (("app", "shop"),))] == 2


def test_callback_attempts_are_counted_by_outcome_status_class_and_protocol() -> None:
    metrics = Metrics()
    metrics.observe_attempt("shop", "retryable", 503, 0.1)
    metrics.observe_attempt("shop", "retryable", None, 3.0)
    metrics.observe_attempt("shop", "delivered", None, 0.01, "amqp")
    got = samples(metrics)
    key = (("app", "shop"), ("outcome", "retryable"), ("protocol", "http"), ("status_class", "5xx"))
    assert got[("tjobs_callback_attempts_total", key)] == 1
    key = (("app", "shop"), ("outcome", "retryable"), ("protocol", "http"), ("status_class", "none"))
    assert got[("tjobs_callback_attempts_total", key)] == 1
    key = (("app", "shop"), ("outcome", "delivered"), ("protocol", "amqp"), ("status_class", "none"))
    assert got[("tjobs_callback_attempts_total", key)] == 1
    assert got[("tjobs_callback_duration_seconds_count", (("app", "shop"), ("protocol", "http")))] == 2
    assert got[("tjobs_callback_duration_seconds_count", (("app", "shop"), ("protocol", "amqp")))] == 1


def test_status_class_is_bounded() -> None:
    assert [status_class(s) for s in (None, 200, 302, 429, 503, 999)] == ["none", "2xx", "3xx", "4xx", "5xx", "other"]


def test_cluster_view_feeds_ownership_leadership_and_failover_gauges() -> None:
    metrics = Metrics()
    view: dict[str, object] = {
        "mode": "cluster",
        "is_leader": True,
        "plan_version": 7,
        "plan_age_ms": 1500,
        "lease_remaining_ms": 4000,
        "sync_lag_ms": 250,
        "groups": [{"id": 0, "holder": "n1"}, {"id": 1, "holder": "n2"}, {"id": 2, "holder": None}],
        "nodes": [{"id": "n1", "healthy": True, "failovers": 3}, {"id": "n2", "healthy": False}],
    }
    metrics.observe_cluster(view, "n1")
    metrics.observe_cluster({**view, "is_leader": False}, "n1")
    got = samples(metrics)
    assert got[("tjobs_groups_owned", ())] == 1
    assert got[("tjobs_groups_without_primary", ())] == 1
    assert got[("tjobs_failovers", ())] == 3
    assert got[("tjobs_dispatcher_leader", ())] == 0
    assert got[("tjobs_leadership_changes_total", ())] == 2
    assert got[("tjobs_cluster_nodes", (("health", "unhealthy"),))] == 1
    assert got[("tjobs_plan_age_seconds", ())] == 1.5


def test_embedded_node_counts_as_its_own_leader() -> None:
    metrics = Metrics()
    metrics.observe_cluster({"mode": "embedded"}, "n1")
    assert samples(metrics)[("tjobs_dispatcher_leader", ())] == 1


def test_api_requests_are_counted_by_route_template_and_carry_a_request_id() -> None:
    import httpx
    from fastapi import FastAPI

    from tjobs.api.metrics_middleware import MetricsMiddleware

    metrics = Metrics()
    api = FastAPI()

    @api.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        return {"id": thing_id}

    api.add_middleware(MetricsMiddleware, metrics=metrics)

    async def calls() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = await client.get("/v1/things/a", headers={"x-request-id": "req-1"})
            second = await client.get("/v1/things/b")
            await client.get("/nowhere")
        return first, second

    first, second = asyncio.run(calls())
    assert first.headers["x-request-id"] == "req-1"
    assert len(second.headers["x-request-id"]) == 32
    got = samples(metrics)
    key = (("method", "GET"), ("route", "/v1/things/{thing_id}"), ("status_class", "2xx"))
    assert got[("tjobs_api_requests_total", key)] == 2
    assert got[("tjobs_api_requests_total", (("method", "GET"), ("route", "unmatched"), ("status_class", "4xx")))] == 1
    assert got[("tjobs_api_request_duration_seconds_count", (("route", "/v1/things/{thing_id}"),))] == 2


def test_flow_outcomes_count_retries_dead_letters_and_first_delivery_lateness() -> None:
    metrics = Metrics()
    metrics.observe_flow_update("shop", "pending", None)
    metrics.observe_flow_update("shop", "dead", None)
    metrics.observe_flow_update("shop", "delivered", 0.3)
    got = samples(metrics)
    assert got[("tjobs_callback_retries_total", (("app", "shop"),))] == 1
    assert got[("tjobs_dead_letters_total", (("app", "shop"),))] == 1
    assert got[("tjobs_flow_outcomes_total", (("app", "shop"), ("status", "delivered")))] == 1
    assert got[("tjobs_delivery_lateness_seconds_bucket", (("app", "shop"), ("le", "0.5")))] == 1


def _observer(metrics: Metrics) -> MetricsObserver:
    """The node's observer over ``metrics`` (what a node's limiter reports to)."""
    clock = ManualClock(0)
    return MetricsObserver(metrics, ServiceLevels(clock.now_ms), clock.now_ms)


async def test_callbacks_delayed_by_the_rate_limit_are_counted_as_throttled_by_rate() -> None:
    from tjobs.delivery.limiter import AppLimiter

    # Given an app limited to 64/s with a burst of 4, and a frozen limiter clock
    metrics = Metrics()
    limiter = AppLimiter(10, burst_s=1 / 16, monotonic=lambda: 0.0, observer=_observer(metrics))

    async def one() -> None:
        async with limiter.slot("shop", 64.0, 100):
            pass

    # When 10 callbacks want to go at once
    await asyncio.gather(*(one() for _ in range(10)))
    # Then the 6 beyond the burst waited for the bucket: throttled, and all were sent
    got = samples(metrics)
    assert got[("tjobs_throttled_fires_total", (("app", "shop"), ("reason", "rate")))] == 6
    assert ("tjobs_throttled_fires_total", (("app", "shop"), ("reason", "concurrency"))) not in got


async def test_callbacks_queued_for_the_apps_concurrency_cap_are_counted_as_throttled_by_concurrency() -> None:
    from tjobs.delivery.limiter import AppLimiter

    metrics = Metrics()
    limiter = AppLimiter(100, observer=_observer(metrics))

    async def hold() -> None:
        async with limiter.slot("shop", 0.0, 2):
            await asyncio.sleep(0.01)

    await asyncio.gather(*(hold() for _ in range(5)))
    got = samples(metrics)
    assert got[("tjobs_throttled_fires_total", (("app", "shop"), ("reason", "concurrency")))] == 3
    assert ("tjobs_throttled_fires_total", (("app", "shop"), ("reason", "rate"))) not in got


async def test_waiting_for_the_nodes_global_cap_is_not_an_apps_throttling() -> None:
    from tjobs.delivery.limiter import AppLimiter

    metrics = Metrics()
    limiter = AppLimiter(1, observer=_observer(metrics))

    async def hold(app: str) -> None:
        async with limiter.slot(app, 0.0, 10):
            await asyncio.sleep(0.01)

    await asyncio.gather(*(hold(app) for app in ("a", "b", "c", "a")))
    assert not any(name == "tjobs_throttled_fires_total" for name, _ in samples(metrics))


async def test_a_nodes_limiter_feeds_its_throttled_fires_counter() -> None:
    from tjobs.node import Node
    from tjobs.settings import load_settings

    node = Node(load_settings(None, storage={"urls": ["memory://"], "topology": "2x2x4"}))
    async with node.limiter.slot("shop", 0.0, 1):
        waiter = asyncio.create_task(_enter(node, "shop"))
        await asyncio.sleep(0.01)
    await waiter
    got = samples(node.metrics)
    assert got[("tjobs_throttled_fires_total", (("app", "shop"), ("reason", "concurrency")))] == 1


async def _enter(node: Node, app: str) -> None:
    async with node.limiter.slot(app, 0.0, 1):
        pass


def test_null_metrics_take_every_hook_and_render_nothing() -> None:
    from tjobs.observability.metrics import NullMetrics

    metrics = NullMetrics()
    metrics.observe_fire("shop", 0.2)
    metrics.observe_attempt("shop", "delivered", 204, 0.01)
    metrics.observe_flow_update("shop", "delivered", 0.3)
    metrics.observe_throttled("shop", "rate")
    metrics.observe_hot_tier_lag("redis", 0.01)
    metrics.observe_cluster({"mode": "embedded"}, "n1")
    metrics.registrations.labels("shop").inc()
    metrics.misfires.labels("shop", "skip").inc(2)
    metrics.fire_tx_duration.observe(0.01)
    metrics.wheel_size.set(3)
    assert metrics.enabled is False
    assert metrics.render() == b"" and list(metrics.registry.collect()) == []


async def test_a_node_with_metrics_off_fires_and_answers_404_on_metrics() -> None:
    import time

    import httpx

    from testkit import run_node
    from tests.receiver import Receiver
    from tjobs.settings import load_settings

    admin_key = "tja_ops_metrics_off_admin"
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "2x2x4"},
        api={"admin_key": admin_key},
        metrics={"enabled": False},
        allow_loopback_callbacks=True,
    )
    async with Receiver() as receiver, run_node(settings) as running:
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {admin_key}"}
        ) as admin:
            created = await admin.post("/v1/apps", json={"name": "off", "allowed_callback_hosts": ["127.0.0.1"]})
            scrape = await admin.get("/metrics")
        app = created.json()
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {app['api_key']}"}
        ) as client:
            task = await client.post(
                "/v1/tasks",
                json={
                    "name": "off",
                    "schedule": {"kind": "delay", "delay_ms": 200},
                    "callback": {"url": receiver.url("/hook")},
                },
            )
            assert task.status_code == 201, task.text
            await receiver.wait_for(1, "/hook")
            deadline = time.monotonic() + 5
            while True:
                slo = (await client.get("/v1/slo")).json()
                if slo["reach"]["delivered"] == 1 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
    assert scrape.status_code == 404 and scrape.json()["error"]["code"] == "metrics_disabled"
    assert len(scrape.headers["x-request-id"]) == 32
    assert slo["reach"]["delivered"] == 1  # the SLO accounting (tjobs.observability.slo) does not depend on the metrics
    assert slo["commit_lateness"]["1m"]["fires"] == 1
    assert slo["delivery_lateness"]["1m"]["attempts"] == 1


def test_runner_totals_advance_the_rejected_fire_and_failed_transaction_counters() -> None:
    metrics = Metrics()
    metrics.observe_runner(cas_rejected=3, commit_errors=1, commit_fenced=0)
    metrics.observe_runner(cas_rejected=5, commit_errors=1, commit_fenced=2)
    got = samples(metrics)
    assert got[("tjobs_fires_rejected_total", ())] == 5
    assert got[("tjobs_fire_transaction_failures_total", (("reason", "error"),))] == 1
    assert got[("tjobs_fire_transaction_failures_total", (("reason", "fenced"),))] == 2


# Every metric issue 5 asks for, as a running node feeds it: counters and histograms must have counted.
COUNTED = (
    "tjobs_registrations_total",
    "tjobs_fires_total",
    "tjobs_fire_lateness_seconds_count",
    "tjobs_delivery_lateness_seconds_count",
    "tjobs_callback_attempts_total",
    "tjobs_callback_duration_seconds_count",
    "tjobs_callback_retries_total",
    "tjobs_dead_letters_total",
    "tjobs_throttled_fires_total",
    "tjobs_fire_transaction_duration_seconds_count",
    "tjobs_fire_transaction_batch_size_count",
    "tjobs_leadership_changes_total",
    "tjobs_api_requests_total",
    "tjobs_api_request_duration_seconds_count",
    "tjobs_flow_outcomes_total",
)
EXPORTED = (  # gauges, and counters this scenario has no reason to move
    "tjobs_wheel_tasks",
    "tjobs_jobs_owned",
    "tjobs_groups_owned",
    "tjobs_failovers",
    "tjobs_cycle_load_duration_seconds",
    "tjobs_compensator_backlog",
    "tjobs_fires_rejected_total",
    "tjobs_dispatcher_leader",
)


async def test_a_running_node_feeds_every_metric_operators_were_promised() -> None:
    import time

    import httpx

    from testkit import run_node
    from tests.receiver import Receiver, Reply
    from tjobs.settings import load_settings

    admin_key = "tja_ops_metrics_fed_admin"
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "2x2x4"},
        api={"admin_key": admin_key},
        scheduler={"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3, "misfire_threshold_s": 1.0},
        callbacks={"backoff_base_ms": 20, "backoff_max_ms": 50},
        allow_loopback_callbacks=True,
    )
    async with Receiver() as receiver, run_node(settings) as running:
        receiver.script("/fail", then=Reply(500))
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {admin_key}"}
        ) as admin:
            app = (
                await admin.post(
                    "/v1/apps",
                    json={
                        "name": "fed",
                        "allowed_callback_hosts": ["127.0.0.1"],
                        "rate_limit_per_s": 4.0,
                    },
                )
            ).json()
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {app['api_key']}"}
        ) as client:
            # Given: six on-time fires at once for an app limited to 4/s (delivered, some throttled),
            # and one whose receiver always fails (a retry, then the dead letter)
            bodies: list[dict[str, object]] = [
                {
                    "name": f"ok-{i}",
                    "schedule": {"kind": "delay", "delay_ms": 300},
                    "callback": {"url": receiver.url("/ok")},
                }
                for i in range(6)
            ]
            bodies.append(
                {
                    "name": "fails",
                    "schedule": {"kind": "delay", "delay_ms": 300},
                    "callback": {"url": receiver.url("/fail"), "max_attempts": 2},
                }
            )
            for body in bodies:
                response = await client.post("/v1/tasks", json=body)
                assert response.status_code == 201, response.text
            await receiver.wait_for(6, "/ok")
            await receiver.wait_for(2, "/fail")
            deadline = time.monotonic() + 5
            while True:
                scraped = await client.get("/metrics")
                text = scraped.text
                if "tjobs_dead_letters_total{" in text or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[s.name] = values.get(s.name, 0.0) + s.value
    # Then every counter and histogram counted (misfires: see the next test), and the rest are exported
    assert [name for name in COUNTED if values.get(name, 0) <= 0] == []
    assert [name for name in EXPORTED if name not in values] == []
    assert values["tjobs_jobs_owned"] == 16


def test_a_misfire_committed_by_the_node_is_counted_by_policy() -> None:
    from tjobs.model import (
        DeliveryMode,
        FireIntent,
        FireOutcome,
        Flow,
        FlowKind,
        FlowStatus,
        MisfirePolicy,
        Task,
        TaskStatus,
    )
    from tjobs.node import Node
    from tjobs.settings import load_settings

    node = Node(load_settings(None, storage={"urls": ["memory://"], "topology": "2x2x4"}))
    now_ms = 1_800_000_000_000
    scheduled_ms = now_ms - 120_000
    task = Task(
        7,
        "shop",
        "late",
        None,
        IntervalSpec(1000, 0),
        CallbackSpec(("http://127.0.0.1:9/",)),
        None,
        MisfirePolicy.FIRE_SOON,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        now_ms + 60_000,
        3,
        1,
        now_ms,
        now_ms,
    )
    flow = Flow(7, scheduled_ms, "shop", FlowKind.MISFIRE, FlowStatus.PENDING, 0, now_ms, now_ms, now_ms, missed=1)
    # A fire found 2 minutes late, collapsing one more missed occurrence, as the fire transaction reports it
    node.observer.fires_committed([FireOutcome(FireIntent(7, scheduled_ms, 2), task, [flow])], now_ms, 0.003)
    got = samples(node.metrics)
    assert got[("tjobs_misfires_total", (("app", "shop"), ("policy", "fire_soon")))] == 2
    assert got[("tjobs_fires_total", (("app", "shop"), ("outcome", "committed")))] == 1
    assert got[("tjobs_fire_lateness_seconds_bucket", (("app", "shop"), ("le", "300.0")))] == 1


def test_per_app_series_render_as_prometheus_clients_own_counters_and_histograms_would() -> None:
    # The fire path's metrics are plain numbers rendered at scrape (tjobs.observability.metrics_per_app); dashboards and
    # alerts were written against prometheus_client's Counter and Histogram: same samples, bar _created.
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from tjobs.observability.metrics import DURATION_BUCKETS_S, LATENESS_BUCKETS_S

    registry = CollectorRegistry()
    fires = Counter("tjobs_fires", "Fires by outcome", ["app", "outcome"], registry=registry)
    lateness = Histogram(
        "tjobs_fire_lateness_seconds",
        "Fire commit time minus scheduled instant",
        ["app"],
        buckets=LATENESS_BUCKETS_S,
        registry=registry,
    )
    attempts = Counter(
        "tjobs_callback_attempts",
        "Callback attempts by outcome, status class and protocol",
        ["app", "outcome", "status_class", "protocol"],
        registry=registry,
    )
    duration = Histogram(
        "tjobs_callback_duration_seconds",
        "Callback attempt duration",
        ["app", "protocol"],
        buckets=DURATION_BUCKETS_S,
        registry=registry,
    )
    metrics = Metrics()
    observations = [("shop", 0.0), ("shop", 0.005), ("shop", 0.0051), ("shop", 1.0), ("shop", 301.0), ("b", 7.5)]
    for app, value in observations:
        metrics.observe_fire(app, value)
        fires.labels(app, "committed").inc()
        lateness.labels(app).observe(value)
    for status, seconds, protocol in (
        (200, 0.001, "http"),
        (204, 0.3, "http"),
        (503, 5.0, "http"),
        (None, 9.0, "nats"),
    ):
        outcome = "delivered" if status and status < 300 else "retryable"
        metrics.observe_attempt("shop", outcome, status, seconds, protocol)
        attempts.labels("shop", outcome, status_class(status), protocol).inc()
        duration.labels("shop", protocol).observe(seconds)

    def parsed(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples
            if not s.name.endswith("_created")
        }

    ours = {
        key: value
        for key, value in parsed(metrics.render()).items()
        if key[0].startswith(
            ("tjobs_fires_total", "tjobs_fire_lateness", "tjobs_callback_attempts", "tjobs_callback_duration")
        )
    }
    assert ours == parsed(generate_latest(registry))


async def test_a_running_nodes_re_drives_and_hand_backs_advance_their_counters() -> None:
    import time

    import httpx

    from testkit import run_node
    from tests.receiver import Receiver, Reply
    from tjobs.model import Flow, FlowKind, FlowStatus
    from tjobs.settings import load_settings

    admin_key = "tja_ops_metrics_redriven_admin"
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "2x2x4"},
        api={"admin_key": admin_key},
        scheduler={"tick_ms": 10, "cycle_s": 10, "load_lead_s": 3, "misfire_threshold_s": 1.0},
        allow_loopback_callbacks=True,
    )
    async with Receiver() as receiver, run_node(settings) as running:
        receiver.script("/slow", then=Reply(delay_s=2.0))
        node = running.node
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {admin_key}"}
        ) as admin:
            body = {"name": "one-at-a-time", "allowed_callback_hosts": ["127.0.0.1"], "max_concurrency": 1}
            app = (await admin.post("/v1/apps", json=body)).json()
        async with httpx.AsyncClient(
            base_url=running.base_url, headers={"authorization": f"Bearer {app['api_key']}"}
        ) as client:

            async def task(path: str, delay_ms: int) -> int:
                body = {"name": path, "schedule": {"kind": "delay", "delay_ms": delay_ms}}
                created = await client.post("/v1/tasks", json={**body, "callback": {"url": receiver.url(path)}})
                assert created.status_code == 201, created.text
                return int(created.json()["id"])

            # Given a flow whose node died before it was sent (stored pending, its attempt a minute overdue),
            # found by the compensator's pass
            later = await task("/redriven", 600_000)
            overdue_ms = node.clock.now_ms() - 60_000
            lost = Flow(
                later, overdue_ms, app["id"], FlowKind.MANUAL, FlowStatus.PENDING, 0, overdue_ms, overdue_ms, overdue_ms
            )
            await node.store.insert_manual_flow(later, lost)
            assert await node.compensator.run_once() == 1
            await receiver.wait_for(1, "/redriven")
            # and two flows of an app sent one at a time, the first under way and the second queued, when the
            # node lets their shards go (a node joined, or this one is stopping)
            await task("/slow", 100)
            await task("/slow", 100)
            await receiver.wait_for(1, "/slow")
            deadline = time.monotonic() + 5
            while True:  # until the second has fired and waits in the app's queue
                if node.deliverer.backlog >= 1 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            assert node.deliverer.backlog == 1
            queued = (await client.get("/metrics")).text
            node.deliverer.forget_runs(frozenset(node.store.topology.shards()))
            deadline = time.monotonic() + 5
            while True:
                text = (await client.get("/metrics")).text
                if "tjobs_flows_handed_back_total 1.0" in text or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
    # Then while it waited, its app's queue here showed it, with no drain time before the queue has a pace (30 s)
    waiting = [(s.name, s.labels, s.value) for family in text_string_to_metric_families(queued) for s in family.samples]
    assert [(n, v) for n, labels, v in waiting if n == "tjobs_delivery_queued" and labels == {"app": app["id"]}] == [
        ("tjobs_delivery_queued", 1.0)
    ]
    assert not [n for n, _, _ in waiting if n == "tjobs_delivery_queue_drain_seconds"]
    values = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    assert "tjobs_delivery_queued" not in values  # let go: no app waits here any more
    # And the re-drive is counted, and the queued flow written back for the shard's owner
    assert values["tjobs_flows_redriven_total"] == 1
    assert values["tjobs_flows_leased_total"] == 1
    assert values["tjobs_flows_handed_back_total"] == 1
