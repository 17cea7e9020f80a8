"""The executor helper (tjobs.executor) in real services against a real embedded node: an ASGI service and
an aiohttp one register at start-up, run a pool task's job once, and deregister at shutdown; callbacks
that are forged, repeated, failing or for an unknown path get the answers tjobs acts on; a lease that
ended behind the executor's back is taken again by its heartbeat."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import uvicorn
from aiohttp import web
from fastapi import FastAPI

from testkit import RunningNode, run_node
from testkit.ports import free_port
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.delivery.signing import generate_secret, signature_header
from tjobs.executor import Executor, Job
from tjobs.settings import load_settings


@pytest.fixture
async def node() -> AsyncIterator[RunningNode]:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, **FAST_SETTINGS)
    async with run_node(settings) as running:
        yield running


async def eventually(condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s} s: {what}", pytrace=False)
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def serving_asgi(app: Any, port: int) -> AsyncIterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the executor service did not start"
            await asyncio.sleep(0.02)
        yield
    finally:
        server.should_exit = True
        await task


async def pool_task(node: RunningNode, key: str, pool: dict[str, Any]) -> None:
    answer = await call(
        node,
        key,
        "POST",
        "/v1/tasks",
        {"name": "p", "schedule": {"kind": "delay", "delay_ms": 0}, "callback": {"pool": pool}},
    )
    assert answer.status_code == 201, answer.text


async def call(node: RunningNode, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=node.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        return await client.request(method, path, json=body)


async def test_an_asgi_service_registers_runs_its_job_once_and_deregisters_on_shutdown(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    port = free_port()
    executor = Executor(
        node.base_url,
        key,
        pool="workers",
        address=f"http://127.0.0.1:{port}/tjobs/",
        signing_secrets=app_record.secrets,
        zone="z1",
    )
    ran: list[Job] = []

    @executor.handler("/refresh")
    async def refresh(job: Job) -> None:
        ran.append(job)

    service = FastAPI(lifespan=executor.lifespan)
    service.mount("/tjobs", executor.asgi_app())
    async with serving_asgi(service, port):
        listed = (await call(node, key, "GET", "/v1/pools/workers")).json()
        assert [(e["id"], e["zone"]) for e in listed["executors"]] == [(executor.executor_id, "z1")]
        await pool_task(node, key, {"name": "workers", "path": "/refresh"})

        async def ran_once() -> bool:
            return len(ran) == 1

        await eventually(ran_once, "the job ran")
        assert ran[0].executor_id == executor.executor_id and ran[0].path == "/refresh"
    assert (await call(node, key, "GET", "/v1/pools/workers")).status_code == 404  # deregistered, not left to its TTL


async def test_an_aiohttp_service_registers_runs_sharded_items_and_deregisters(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    port = free_port()
    executor = Executor(
        node.base_url, key, pool="shards", address=f"http://127.0.0.1:{port}/jobs", signing_secrets=app_record.secrets
    )
    items: list[int | None] = []

    @executor.handler()
    async def run(job: Job) -> None:
        items.append(job.shard_index)

    application = web.Application()
    executor.setup_aiohttp(application, prefix="/jobs")
    runner = web.AppRunner(application)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await pool_task(node, key, {"name": "shards", "mode": "sharded", "shard_total": 3})

        async def every_item() -> bool:
            return sorted(i for i in items if i is not None) == [0, 1, 2]

        await eventually(every_item, "the three items ran")
    finally:
        await runner.cleanup()
    assert (await call(node, key, "GET", "/v1/pools/shards")).status_code == 404


async def test_forged_repeated_failing_and_unrouted_callbacks_get_the_answers_tjobs_acts_on() -> None:
    secret = generate_secret()
    executor = Executor("http://127.0.0.1:9", "key", pool="p", address="http://127.0.0.1:1", signing_secrets=[secret])
    calls: list[str] = []

    @executor.handler("/ok")
    async def ok(job: Job) -> None:
        calls.append(job.flow_id)

    @executor.handler("/boom")
    async def boom(job: Job) -> None:
        raise RuntimeError("the work failed")

    def signed(flow_id: str, body: bytes, **extra: str) -> dict[str, str]:
        now = int(time.time())
        return {
            "webhook-id": flow_id,
            "webhook-timestamp": str(now),
            "webhook-signature": signature_header([secret], flow_id, now, body),
            **extra,
        }

    body = b'{"flow_id": "1-2", "payload": {"n": 1}}'
    assert (await executor.dispatch("/ok", signed("1-2", body), body))[0] == 200
    assert (await executor.dispatch("/ok", signed("1-2", body), body))[0] == 200  # a retry: not run again
    assert calls == ["1-2"]
    item = signed("1-2", body, **{"tjobs-shard-index": "1"})
    assert (await executor.dispatch("/ok", item, body))[0] == 200  # another item of that fire: run
    assert calls == ["1-2", "1-2"]
    forged = signed("1-2", body)
    assert (await executor.dispatch("/ok", forged, b'{"payload": "changed"}'))[0] == 401
    assert (await executor.dispatch("/boom", signed("3-4", body), body))[0] == 500  # tjobs retries it
    assert (await executor.dispatch("/nowhere", signed("5-6", body), body))[0] == 404
    await executor.stop()


async def test_a_lease_that_ended_behind_the_executors_back_is_taken_again_by_its_heartbeat(
    node: RunningNode,
) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    executor = Executor(
        node.base_url,
        key,
        pool="workers",
        address="http://127.0.0.1:9/",
        signing_secrets=app_record.secrets,
        executor_id="steady",
        ttl_s=2,
    )
    await executor.start()
    try:
        assert (await call(node, key, "DELETE", "/v1/pools/workers/executors/steady")).status_code == 204

        async def back() -> bool:
            return (await call(node, key, "GET", "/v1/pools/workers")).status_code == 200

        await eventually(back, "registered again by the heartbeat")
    finally:
        await executor.stop()
