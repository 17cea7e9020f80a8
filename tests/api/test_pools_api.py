"""``/v1/pools``: executors register (idempotently), heartbeat and leave; apps see only their own pools;
an executor's address passes the target policy like a callback URL; bad input names its field.

The registry is the coordinator's (here the embedded one; etcd's is held to the same contract by
``tests/contract/test_coordinator_contract.py``), so one storage backend is enough for the routes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, cast

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.receiver import Receiver
from tjobs.clock import datetime_to_ms
from tjobs.cluster.base import RENEW_LATER

pytestmark = pytest.mark.asyncio(loop_scope="session")

Tenants = Callable[..., Awaitable[Tenant]]


@pytest.fixture(scope="module")
def api_storage() -> Iterator[dict[str, Any]]:
    yield {"urls": ["memory://"], "topology": "2x2x4"}


async def test_an_executor_registers_heartbeats_is_listed_and_leaves(tenant_factory: Tenants) -> None:
    tenant = await tenant_factory("pools")
    client = tenant.client
    body = {"id": "w-1", "address": "http://127.0.0.1:9001", "zone": "z1", "weight": 2, "capacity": 8, "ttl_s": 30}
    first = await client.post("/v1/pools/workers/executors", json=body)
    assert first.status_code == 201, first.text
    assert first.json() | {"registered_at": None} == {**body, "registered_at": None}
    again = await client.post("/v1/pools/workers/executors", json=body)
    assert again.status_code == 200  # idempotent: the same executor, its lease renewed
    await client.post("/v1/pools/workers/executors", json={"id": "w-2", "address": "http://127.0.0.1:9002"})

    listed = (await client.get("/v1/pools/workers")).json()
    assert [e["id"] for e in listed["executors"]] == ["w-1", "w-2"]
    assert (await client.get("/v1/pools")).json() == {
        "items": [{"name": "workers", "executors": 2, "zones": ["", "z1"]}]
    }
    beat = await client.put("/v1/pools/workers/executors/w-1/heartbeat")
    assert beat.status_code == 200 and beat.json() == {"id": "w-1", "ttl_s": 30}

    assert (await client.delete("/v1/pools/workers/executors/w-1")).status_code == 204
    assert (await client.delete("/v1/pools/workers/executors/w-1")).status_code == 404
    gone = await client.put("/v1/pools/workers/executors/w-1/heartbeat")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"  # register again
    assert [e["id"] for e in (await client.get("/v1/pools/workers")).json()["executors"]] == ["w-2"]
    assert (await client.delete("/v1/pools/workers/executors/w-2")).status_code == 204
    assert (await client.get("/v1/pools/workers")).status_code == 404  # no live executor: no pool
    assert (await client.get("/v1/pools")).json() == {"items": []}


async def test_a_pool_shows_each_executors_last_heartbeat_lease_expiry_and_callbacks_in_flight(
    tenant_factory: Tenants, api_node: RunningNode
) -> None:
    tenant = await tenant_factory("pool-leases")
    client = tenant.client
    before_ms = api_node.node.clock.now_ms()
    await client.post(
        "/v1/pools/workers/executors", json={"id": "w-1", "address": "http://127.0.0.1:9001", "ttl_s": 30}
    )
    assert (await client.put("/v1/pools/workers/executors/w-1/heartbeat")).status_code == 200
    (shown,) = (await client.get("/v1/pools/workers")).json()["executors"]
    after_ms = api_node.node.clock.now_ms()
    heartbeat_ms, expires_ms = (
        datetime_to_ms(datetime.fromisoformat(shown[at])) for at in ("last_heartbeat_at", "lease_expires_at")
    )
    assert before_ms <= heartbeat_ms <= after_ms  # the heartbeat just sent (to the millisecond, embedded)
    assert heartbeat_ms + 30_000 == expires_ms  # the lease: TTL after the last heartbeat
    assert shown["in_flight"] == 0 and shown["id"] == "w-1" and shown["ttl_s"] == 30


async def test_a_heartbeat_is_authenticated_counted_and_answered_like_any_route(
    tenant_factory: Tenants, admin: httpx.AsyncClient
) -> None:
    """What the heartbeat's lean route (ahead of FastAPI's routing) keeps of every other route."""
    client = (await tenant_factory("beats")).client
    body = {"id": "w-1", "address": "http://127.0.0.1:9001", "ttl_s": 10}
    await client.post("/v1/pools/workers/executors", json=body)
    path = "/v1/pools/workers/executors/w-1/heartbeat"
    async with httpx.AsyncClient(base_url=str(client.base_url)) as anonymous:
        missing = await anonymous.put(path)
        wrong = await anonymous.put(path, headers={"authorization": "Bearer tjk_not-a-key"})
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.json()["error"]["code"] == wrong.json()["error"]["code"] == "unauthorized"
    beat = await client.put(path, headers={"x-request-id": "beat-1"})
    assert beat.status_code == 200 and beat.json() == {"id": "w-1", "ttl_s": 10}
    assert beat.headers["x-request-id"] == "beat-1"
    assert beat.headers["content-type"] == "application/json"
    other_method = await client.get(path)
    assert other_method.status_code == 405 and other_method.headers["allow"] == "PUT"
    assert (await client.put(path + "/")).status_code in (307, 404)  # no other path is taken for it
    assert (await client.put("/v1/pools/bad%20name/executors/w-1/heartbeat")).status_code == 404
    scraped = (await admin.get("/metrics")).text
    counted = {
        (s.labels["route"], s.labels["method"], s.labels["status_class"]): s.value
        for family in text_string_to_metric_families(scraped)
        if family.name == "tjobs_api_requests"
        for s in family.samples
        if s.name == "tjobs_api_requests_total"
    }
    template = "/v1/pools/{pool}/executors/{executor_id}/heartbeat"
    assert counted[(template, "PUT", "2xx")] >= 1
    assert counted[(template, "PUT", "4xx")] >= 3


async def _exchange(base_url: str, raw: bytes, answers: int = 1) -> list[tuple[int, dict[str, str], Any]]:
    """Send ``raw`` (one or more requests) on one connection; the answers in the order they came."""
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(raw)
        got: list[tuple[int, dict[str, str], Any]] = []
        for _ in range(answers):
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).decode("latin-1")
            lines = head.split("\r\n")
            headers = {n.lower(): v.strip() for n, _, v in (line.partition(":") for line in lines[1:] if line)}
            body = await reader.readexactly(int(headers["content-length"]))
            got.append((int(lines[0].split()[1]), headers, json.loads(body) if body else None))
        return got
    finally:
        writer.close()


def _put(path: str, key: str | None, *extra: str) -> bytes:
    lines = [f"PUT {path} HTTP/1.1", "host: tjobs", "content-length: 0", *extra]
    if key is not None:
        lines.append(f"authorization: Bearer {key}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_heartbeat_served_below_asgi_answers_exactly_as_the_app(
    api_node: RunningNode, tenant_factory: Tenants, admin: httpx.AsyncClient
) -> None:
    """The lean heartbeat path (tjobs.api.lean_heartbeat) against the app's own route: the same request
    sent as is (answered by the HTTP protocol when it can) and with an empty query string (which always
    goes through ASGI, and which the route ignores) gets the same status, body and headers."""
    lean = api_node.api.state.lean_paths
    owner, other = await tenant_factory("lean-owner"), await tenant_factory("lean-other")
    for client in (owner.client, other.client):
        made = await client.post("/v1/pools/workers/executors", json={"id": "w-1", "address": "http://127.0.0.1:9"})
        assert made.status_code in (200, 201)
    await owner.client.post("/v1/pools/own/executors", json={"id": "w-2", "address": "http://127.0.0.1:9", "ttl_s": 9})
    beat = "/v1/pools/{}/executors/{}/heartbeat"
    cases = [  # (path, key, extra header lines, whether the lean path answers it)
        (beat.format("own", "w-2"), owner.api_key, ["x-request-id: rid-1"], True),  # 200
        (beat.format("own", "nobody"), owner.api_key, ["x-request-id: rid-2"], True),  # unknown executor: 404
        (beat.format("own", "w-2"), other.api_key, ["x-request-id: rid-3"], True),  # another app's pool: 404
        (beat.format("Bad.Name", "w-2"), owner.api_key, ["x-request-id: rid-4"], True),  # bad pool name
        (beat.format("own", "-bad-id"), owner.api_key, ["x-request-id: rid-5"], True),  # bad executor id
        (beat.format("own", "w-2"), None, ["x-request-id: rid-6"], False),  # no key: 401
        (beat.format("own", "w-2"), "tjk_not-a-key", ["x-request-id: rid-7"], False),  # unknown key: 401
        (beat.format("own", "w-2"), owner.api_key, ["x-request-id: bad id"], True),  # insane id: a fresh one
    ]
    for path, key, extra, served_lean in cases:
        before = lean.served
        [(status, headers, body)] = await _exchange(api_node.base_url, _put(path, key, *extra))
        assert lean.served == before + served_lean, path
        [(asgi_status, asgi_headers, asgi_body)] = await _exchange(api_node.base_url, _put(path + "?", key, *extra))
        assert lean.served == before + served_lean, "a query string goes through ASGI"
        assert (status, body) == (asgi_status, asgi_body), path
        if extra[0] == "x-request-id: bad id":
            assert len(headers.pop("x-request-id")) == len(asgi_headers.pop("x-request-id")) == 32
        headers.pop("date"), asgi_headers.pop("date")
        assert headers == asgi_headers, path

    # a body, a chunked one, Expect, HTTP/1.0 or Connection: close go through ASGI (its body limits)
    limit = api_node.node.settings.api.max_body_bytes
    over = _put(beat.format("own", "w-2"), owner.api_key).replace(
        b"content-length: 0", f"content-length: {limit + 1}".encode()
    )
    before = lean.served
    [(status, _, body)] = await _exchange(api_node.base_url, over)
    assert status == 413 and body["error"]["code"] == "too_large" and lean.served == before
    closing = _put(beat.format("own", "w-2"), owner.api_key, "connection: close")
    [(status, headers, _)] = await _exchange(api_node.base_url, closing)
    assert status == 200 and headers["connection"] == "close" and lean.served == before

    # pipelined heartbeats on one connection are answered in order
    pipelined = b"".join(
        _put(beat.format("own", e), owner.api_key, f"x-request-id: p{i}")
        for i, e in enumerate(["w-2", "nobody", "w-2"])
    )
    answers = await _exchange(api_node.base_url, pipelined, answers=3)
    assert [(status, headers["x-request-id"]) for status, headers, _ in answers] == [
        (200, "p0"),
        (404, "p1"),
        (200, "p2"),
    ]

    # a disabled app: 403 from the app (the lean path serves no disabled app)
    assert (await admin.post(f"/v1/apps/{other.app.id}/disable")).status_code == 200
    before = lean.served
    [(status, _, body)] = await _exchange(api_node.base_url, _put(beat.format("workers", "w-1"), other.api_key))
    [(asgi_status, _, asgi_body)] = await _exchange(
        api_node.base_url, _put(beat.format("workers", "w-1") + "?", other.api_key)
    )
    assert (status, body) == (asgi_status, asgi_body) and status == 403 and lean.served == before


async def test_a_heartbeat_the_registry_renews_at_once_is_answered_at_once_and_one_it_cannot_after_it_did(
    api_node: RunningNode, tenant_factory: Tenants, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lean path answers in the protocol's own callback when the registry renews without I/O
    (``renew_executor_now``; the embedded registry always can) and through a task awaiting
    ``renew_executor`` when it cannot (an etcd node that must renew or read): the same answers both ways,
    and the same as the app's."""
    lean = api_node.api.state.lean_paths
    owner = await tenant_factory("lean-at-once")
    made = await owner.client.post("/v1/pools/p/executors", json={"id": "e", "address": "http://127.0.0.1:9"})
    assert made.status_code in (200, 201)
    beat = "/v1/pools/p/executors/{}/heartbeat"

    async def compare(executor_id: str, rid: str) -> int:
        [(status, headers, body)] = await _exchange(
            api_node.base_url, _put(beat.format(executor_id), owner.api_key, f"x-request-id: {rid}")
        )
        [(asgi_status, asgi_headers, asgi_body)] = await _exchange(
            api_node.base_url, _put(beat.format(executor_id) + "?", owner.api_key, f"x-request-id: {rid}")
        )
        headers.pop("date"), asgi_headers.pop("date")
        assert (status, headers, body) == (asgi_status, asgi_headers, asgi_body), executor_id
        return status

    served, at_once = lean.served, lean.at_once
    assert [await compare("e", "now-1"), await compare("nobody", "now-2")] == [200, 404]
    assert (lean.served - served, lean.at_once - at_once) == (2, 2)

    coordinator = api_node.node.coordinator
    later: list[str] = []

    def cannot_tell(app_id: str, pool: str, executor_id: str) -> object:
        later.append(executor_id)
        return RENEW_LATER

    monkeypatch.setattr(coordinator, "renew_executor_now", cannot_tell)
    served, at_once = lean.served, lean.at_once
    assert [await compare("e", "later-1"), await compare("nobody", "later-2")] == [200, 404]
    assert (lean.served - served, lean.at_once - at_once) == (2, 0)
    assert later == ["e", "nobody"]


async def test_a_request_behind_a_heartbeat_answered_at_once_is_not_cut_by_the_keep_alive_timeout(
    api_node: RunningNode, tenant_factory: Tenants, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat answered at once arms the connection's keep-alive timer while its bytes are still being
    parsed; a request pipelined behind it is not idle time: a slow one is answered, not closed on."""
    from testkit.ports import free_port
    from tjobs.api.server import ApiServer, lean_protocol
    from tjobs.service.pools import PoolService

    tenant = await tenant_factory("lean-keepalive")
    await tenant.client.post("/v1/pools/p/executors", json={"id": "e", "address": "http://127.0.0.1:9"})
    lean = api_node.api.state.lean_paths
    protocol = lean_protocol(api_node.api, lean)
    port = free_port()
    config = uvicorn.Config(
        api_node.api,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        loop="none",
        http=protocol,
        timeout_keep_alive=cast(int, 0.2),  # uvicorn's annotation says int; it waits any number of seconds
    )
    server = ApiServer(config)
    serving = asyncio.create_task(server.serve())
    register = PoolService.register

    async def slow_register(self: PoolService, *args: Any) -> Any:
        await asyncio.sleep(0.6)  # three keep-alive timeouts
        return await register(self, *args)

    monkeypatch.setattr(PoolService, "register", slow_register)
    try:
        while not server.started:
            assert not serving.done(), "the server did not start"
            await asyncio.sleep(0.01)
        body = b'{"id": "e2", "address": "http://127.0.0.1:9"}'
        registration = (
            f"POST /v1/pools/p/executors HTTP/1.1\r\nhost: tjobs\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {tenant.api_key}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body
        at_once = lean.at_once
        answers = await _exchange(
            f"http://127.0.0.1:{port}", _put("/v1/pools/p/executors/e/heartbeat", tenant.api_key) + registration, 2
        )
        assert [status for status, _, _ in answers] == [200, 201]
        assert lean.at_once == at_once + 1
    finally:
        server.should_exit = True
        await serving


async def test_a_failure_of_the_lean_heartbeat_path_leaves_the_heartbeat_to_the_app(
    api_node: RunningNode, tenant_factory: Tenants, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await tenant_factory("lean-broken")
    await tenant.client.post("/v1/pools/p/executors", json={"id": "e", "address": "http://127.0.0.1:9"})
    lean = api_node.api.state.lean_paths

    def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(lean, "admit", broken)
    served = lean.served
    beat = await tenant.client.put("/v1/pools/p/executors/e/heartbeat")
    assert beat.status_code == 200 and beat.json() == {"id": "e", "ttl_s": 10}
    assert lean.served == served


async def test_a_heartbeat_over_the_apps_rate_is_refused_by_the_app_not_served_below_it(
    api_node: RunningNode, tenant_factory: Tenants
) -> None:
    lean = api_node.api.state.lean_paths
    slow = await tenant_factory("lean-slow", api_rate_limit_per_s=1)
    await slow.client.post("/v1/pools/p/executors", json={"id": "e", "address": "http://127.0.0.1:9"})
    answers = []
    for _ in range(6):
        [(status, headers, body)] = await _exchange(
            api_node.base_url, _put("/v1/pools/p/executors/e/heartbeat", slow.api_key)
        )
        answers.append((status, lean.served, headers.get("retry-after"), body))
    refused = [a for a in answers if a[0] == 429]
    assert refused and all(a[2] is not None and a[3]["error"]["code"] == "rate_limited" for a in refused)
    assert {a[0] for a in answers} <= {200, 429}
    served = [a[1] for a in answers]
    assert served[-1] - served[0] == sum(a[0] == 200 for a in answers[1:])  # a refusal is never served lean


async def test_an_executor_without_an_id_is_known_by_its_address(tenant_factory: Tenants) -> None:
    client = (await tenant_factory("pools")).client
    first = await client.post("/v1/pools/workers/executors", json={"address": "http://127.0.0.1:9100/"})
    second = await client.post("/v1/pools/workers/executors", json={"address": "http://127.0.0.1:9100/"})
    other = await client.post("/v1/pools/workers/executors", json={"address": "http://127.0.0.1:9101/"})
    assert (first.status_code, second.status_code, other.status_code) == (201, 200, 201)
    assert first.json()["id"] == second.json()["id"] != other.json()["id"]
    assert len((await client.get("/v1/pools/workers")).json()["executors"]) == 2


async def test_an_app_can_neither_read_nor_change_another_apps_pool(tenant_factory: Tenants) -> None:
    owner, other = await tenant_factory("owner"), await tenant_factory("other")
    await owner.client.post("/v1/pools/shared-name/executors", json={"id": "e1", "address": "http://127.0.0.1:9200"})
    assert (await other.client.get("/v1/pools/shared-name")).status_code == 404
    assert (await other.client.get("/v1/pools")).json() == {"items": []}
    assert (await other.client.put("/v1/pools/shared-name/executors/e1/heartbeat")).status_code == 404
    assert (await other.client.delete("/v1/pools/shared-name/executors/e1")).status_code == 404
    mine = await other.client.post(
        "/v1/pools/shared-name/executors", json={"id": "e1", "address": "http://127.0.0.1:9"}
    )
    assert mine.status_code == 201  # its own pool of that name, not the owner's executor
    owners = (await owner.client.get("/v1/pools/shared-name")).json()["executors"]
    assert [(e["id"], e["address"]) for e in owners] == [("e1", "http://127.0.0.1:9200")]


async def test_an_executor_address_is_judged_like_a_callback_url(tenant_factory: Tenants) -> None:
    plain = await tenant_factory("plain")
    refused = await plain.client.post("/v1/pools/w/executors", json={"address": "http://10.1.2.3:8000"})
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "address" and refused.json()["error"]["code"] == "target_refused"
    admitted = await tenant_factory("internal", allowed_callback_hosts=["10.0.0.0/8"])
    ok = await admitted.client.post("/v1/pools/w/executors", json={"address": "http://10.1.2.3:8000"})
    assert ok.status_code == 201
    metadata = await admitted.client.post(
        "/v1/pools/w/executors", json={"address": "http://169.254.169.254/", "id": "m"}
    )
    assert metadata.status_code == 422 and metadata.json()["error"]["field"] == "address"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "address"),
        ({"address": "ftp://127.0.0.1/"}, "address"),
        ({"address": "http://user:pw@127.0.0.1/"}, "address"),
        ({"address": "http://127.0.0.1", "id": "-bad"}, "id"),
        ({"address": "http://127.0.0.1", "id": 7}, "id"),
        ({"address": "http://127.0.0.1", "id": "w-1\n"}, "id"),  # `$` alone matches before a final newline
        ({"address": "http://127.0.0.1", "zone": "a b"}, "zone"),
        ({"address": "http://127.0.0.1", "zone": "z1\n"}, "zone"),
        ({"address": "http://127.0.0.1", "weight": 0}, "weight"),
        ({"address": "http://127.0.0.1", "weight": True}, "weight"),
        ({"address": "http://127.0.0.1", "capacity": 0}, "capacity"),
        ({"address": "http://127.0.0.1", "ttl_s": 1}, "ttl_s"),
        ({"address": "http://127.0.0.1", "ttl_s": 301}, "ttl_s"),
        ({"address": "http://127.0.0.1", "colour": "red"}, "colour"),
    ],
)
async def test_a_bad_registration_is_refused_naming_the_field(
    tenant_factory: Tenants, body: dict[str, Any], field: str
) -> None:
    client = (await tenant_factory("bad")).client
    answer = await client.post("/v1/pools/workers/executors", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


async def test_a_bad_pool_name_is_refused_and_an_unknown_pool_is_not_found(tenant_factory: Tenants) -> None:
    client = (await tenant_factory("names")).client
    answer = await client.post("/v1/pools/Not%20A%20Pool/executors", json={"address": "http://127.0.0.1"})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "pool"
    newline = await client.post("/v1/pools/workers%0A/executors", json={"address": "http://127.0.0.1"})
    assert newline.status_code == 422 and newline.json()["error"]["field"] == "pool"
    assert (await client.get("/v1/pools/never-registered")).status_code == 404
    assert (await client.get("/v1/pools/Not%20A%20Pool")).status_code == 404
    assert (
        await client.post("/v1/pools/workers/executors", content=b"[]", headers={"content-type": "application/json"})
    ).status_code == 422


# ---- tasks routed to a pool ------------------------------------------------------------------------


async def test_a_task_in_a_pool_is_delivered_to_a_registered_executor_and_its_flow_says_which(
    tenant_factory: Tenants, receiver: Receiver
) -> None:
    client = (await tenant_factory("routed")).client
    base = receiver.url("")
    await client.post("/v1/pools/workers/executors", json={"id": "exec-a", "address": base})
    body = task_body(receiver, schedule={"kind": "delay", "delay_ms": 0})
    body["callback"] = {"pool": {"name": "workers", "path": "/pooled"}, "headers": {"x-job": "refresh"}}
    created = await client.post("/v1/tasks", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["callback"]["pool"] == {"name": "workers", "path": "/pooled"}
    (request,) = await receiver.wait_for(1, path="/pooled")
    assert request.headers["tjobs-executor-id"] == "exec-a" and request.headers["x-job"] == "refresh"
    task_id = created.json()["id"]
    for _ in range(100):  # the outcome is written behind the callback
        (flow,) = (await client.get(f"/v1/tasks/{task_id}/flows")).json()["items"]
        if flow["status"] == "delivered":
            break
        await asyncio.sleep(0.02)
    assert flow["routes"] == [{"attempt": 1, "destination": "pool:workers", "executor": "exec-a"}]


@pytest.mark.parametrize(
    ("callback", "field", "code"),
    [
        ({"pool": "workers", "url": "http://127.0.0.1:9/"}, "callback.url", "pool_conflict"),
        ({"pool": "workers", "target": "t"}, "callback.target", "pool_conflict"),
        ({"pool": {"name": "workers", "mode": "every"}}, "callback.pool.mode", "invalid_input"),
        ({"pool": {"name": "workers", "mode": "sharded"}}, "callback.pool.shard_total", "invalid_input"),
        ({"pool": {"name": "BAD"}}, "callback.pool.name", "invalid_input"),
        ({"pool": {"name": "workers\n"}}, "callback.pool.name", "invalid_input"),
        ({"pool": {"name": "workers", "path": "/run\n"}}, "callback.pool.path", "invalid_input"),
    ],
)
async def test_a_bad_pool_callback_is_refused_naming_the_field(
    tenant_factory: Tenants, callback: dict[str, Any], field: str, code: str
) -> None:
    client = (await tenant_factory("routed")).client
    answer = await client.post("/v1/tasks", json={**task_body(), "callback": callback})
    assert answer.status_code == 422, answer.text
    assert (answer.json()["error"]["field"], answer.json()["error"]["code"]) == (field, code)
