"""The executor helper's job runs (tjobs.executor, README "Job runs") in a real ASGI service against a real
embedded node: a run handler's callback is answered 202 at once, the handler's progress, log lines and
return value reach the flow; a cancel from the API reaches the handler as ``job.run.cancelled`` and the
run ends cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI

from testkit import RunningNode, run_node
from testkit.ports import free_port
from tests.e2e.conftest import FAST_SETTINGS
from tests.integration.test_executor_helper import call, eventually, pool_task, serving_asgi
from tjobs.executor import Executor, Job
from tjobs.settings import load_settings


@pytest.fixture
async def node() -> AsyncIterator[RunningNode]:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, **FAST_SETTINGS)
    async with run_node(settings) as running:
        yield running


async def _flows(node: RunningNode, key: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await call(node, key, "GET", "/v1/flows")).json()["items"]
    return items


async def test_a_run_handler_reports_progress_logs_and_its_result(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    port = free_port()
    executor = Executor(
        node.base_url, key, pool="exports", address=f"http://127.0.0.1:{port}/", signing_secrets=app_record.secrets
    )
    release = asyncio.Event()

    @executor.handler("/export", run=True)
    async def export(job: Job) -> dict[str, int]:
        assert job.run is not None
        await job.run.progress(50)
        await job.run.log("halfway")
        await release.wait()
        return {"rows": 3}

    service = FastAPI(lifespan=executor.lifespan)
    service.mount("/", executor.asgi_app())
    async with serving_asgi(service, port):
        await pool_task(node, key, {"name": "exports", "path": "/export"})

        async def running_at_50() -> bool:
            flows = await _flows(node, key)
            return len(flows) == 1 and flows[0]["status"] == "running" and flows[0]["run"]["progress"] == 50

        await eventually(running_at_50, "the run reported 50%")
        release.set()

        async def delivered_with_its_send() -> bool:
            # the send that started the run is written with the deliverer's next outcome flush
            flows = await _flows(node, key)
            return flows[0]["status"] == "delivered" and len(flows[0]["attempt_history"]) == 1

        await eventually(delivered_with_its_send, "the run ended")
        [flow] = await _flows(node, key)
        detail = (await call(node, key, "GET", f"/v1/flows/{flow['id']}")).json()
    assert detail["run"]["status"] == "succeeded" and detail["run"]["result"] == {"rows": 3}
    assert [entry["line"] for entry in detail["log"]] == ["halfway"]
    assert [a["status_code"] for a in detail["attempt_history"]] == [202]


async def test_a_cancel_reaches_the_handler_and_the_run_ends_cancelled(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    port = free_port()
    executor = Executor(
        node.base_url,
        key,
        pool="long",
        address=f"http://127.0.0.1:{port}/",
        signing_secrets=app_record.secrets,
        run_heartbeat_s=0.1,
    )
    saw_cancel = asyncio.Event()

    @executor.handler("/", run=True)
    async def long_job(job: Job) -> None:
        assert job.run is not None
        await job.run.cancelled.wait()  # learnt from a heartbeat's answer
        saw_cancel.set()

    service = FastAPI(lifespan=executor.lifespan)
    service.mount("/", executor.asgi_app())
    async with serving_asgi(service, port):
        await pool_task(node, key, {"name": "long"})

        async def running() -> bool:
            flows = await _flows(node, key)
            return len(flows) == 1 and flows[0]["status"] == "running"

        await eventually(running, "the run started")
        [flow] = await _flows(node, key)
        asked = await call(node, key, "POST", f"/v1/flows/{flow['id']}/cancel")
        await asyncio.wait_for(saw_cancel.wait(), 10)

        async def cancelled() -> bool:
            status: str = (await _flows(node, key))[0]["status"]
            return status == "cancelled"

        await eventually(cancelled, "the run ended cancelled")
    assert asked.status_code == 200 and asked.json()["status"] == "cancelling"
    detail = (await call(node, key, "GET", f"/v1/flows/{flow['id']}")).json()
    assert detail["run"]["status"] == "cancelled" and detail["run"]["cancel_requested"] is True


async def test_a_run_that_timed_out_stops_its_handler_at_the_next_heartbeat(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    port = free_port()
    executor = Executor(
        node.base_url,
        key,
        pool="slow",
        address=f"http://127.0.0.1:{port}/",
        signing_secrets=app_record.secrets,
        run_heartbeat_s=0.1,
    )
    stopped = asyncio.Event()

    @executor.handler("/", run=True)
    async def slow(job: Job) -> None:
        assert job.run is not None
        await job.run.cancelled.wait()  # set when a heartbeat is answered 409: the run timed out
        stopped.set()

    service = FastAPI(lifespan=executor.lifespan)
    service.mount("/", executor.asgi_app())
    async with serving_asgi(service, port):
        body = {
            "name": "slow",
            "schedule": {"kind": "delay", "delay_ms": 0},
            "callback": {"pool": {"name": "slow"}, "run_timeout_ms": 1000, "max_attempts": 1},
        }
        assert (await call(node, key, "POST", "/v1/tasks", body)).status_code == 201
        await asyncio.wait_for(stopped.wait(), 15)

        async def dead() -> bool:
            flows = await _flows(node, key)
            return len(flows) == 1 and flows[0]["status"] == "dead"

        await eventually(dead, "the timed-out run's flow is dead (max_attempts 1)")
        [flow] = await _flows(node, key)
    assert flow["run"]["status"] == "timed_out"


async def test_the_retry_of_a_run_that_timed_out_goes_to_the_other_executor_of_the_pool(node: RunningNode) -> None:
    app_record, key = await node.create_app("svc", allowed_callback_hosts=["127.0.0.1"])
    ports = {"a": free_port(), "b": free_port()}
    got: list[str] = []  # the executor of each attempt, in order
    stopped = asyncio.Event()
    executors = {
        name: Executor(
            node.base_url,
            key,
            pool="pair",
            address=f"http://127.0.0.1:{port}/",
            signing_secrets=app_record.secrets,
            executor_id=name,
            run_heartbeat_s=0.1,
        )
        for name, port in ports.items()
    }
    for name, executor in executors.items():

        @executor.handler("/", run=True)
        async def job(job: Job, name: str = name) -> None:
            assert job.run is not None
            got.append(name)
            if len(got) == 1:  # the first run never reports its end: it times out
                await job.run.cancelled.wait()  # set when a heartbeat is answered 409
                stopped.set()

    services = {name: FastAPI(lifespan=e.lifespan) for name, e in executors.items()}
    for name, service in services.items():
        service.mount("/", executors[name].asgi_app())
    async with serving_asgi(services["a"], ports["a"]), serving_asgi(services["b"], ports["b"]):
        body = {
            "name": "pair",
            "schedule": {"kind": "delay", "delay_ms": 0},
            # consistent hashing picks the same executor for every fire of the task: only the flow's
            # tried executors turn its retry away from the one that timed out
            "callback": {
                "pool": {"name": "pair", "strategy": "consistent_hash"},
                "run_timeout_ms": 1000,
                "max_attempts": 2,
            },
        }
        assert (await call(node, key, "POST", "/v1/tasks", body)).status_code == 201
        await asyncio.wait_for(stopped.wait(), 15)

        async def delivered() -> bool:
            flows = await _flows(node, key)
            return len(flows) == 1 and flows[0]["status"] == "delivered"

        await eventually(delivered, "the retry's run succeeded")
        [flow] = await _flows(node, key)
        detail = (await call(node, key, "GET", f"/v1/flows/{flow['id']}")).json()
    assert len(got) == 2 and set(got) == {"a", "b"}  # the retry went to the executor that did not time out
    assert detail["run"]["status"] == "succeeded" and detail["run"]["attempt"] == 2
