"""Target credentials never leak: not in an API answer, not in the node's log, not in a flow's error.

Given ``tjobs serve`` (a real process, its output captured in ``node.log``) and brokers of the test's own
that require credentials (a RabbitMQ user, a NATS token, a Redis password), a gRPC receiver requiring an
``authorization`` and an HTTP receiver,
when an app creates targets carrying the right credentials and others carrying wrong ones, reads,
lists and changes them, sends requests the API refuses, and tasks naming them fire (some delivered, the
wrong ones dead-lettered with an error, one multicast over a right and a wrong target),
then no credential value (user names included) appears in any answer body, in ``node.log`` or in any
flow's ``last_error``; and the right credentials did reach the brokers (their flows are delivered).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiormq
import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from testkit.consumers import GrpcConsumer
from testkit.ports import free_port
from tests.brokers import OwnNats, OwnRabbitMQ, OwnRedis
from tests.e2e.protocol_rig import AppClient, flow_statuses, protocol_node
from tests.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.rabbitmq, pytest.mark.nats, pytest.mark.redis]

TASKS_PER_TARGET = 3


def _secret(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Secrets:
    amqp_user: str
    amqp_password: str
    amqp_wrong_password: str
    nats_token: str
    nats_wrong_token: str
    redis_password: str
    redis_wrong_password: str
    grpc_authorization: str
    grpc_wrong_authorization: str
    http_authorization: str
    rotated_http_authorization: str
    refused_value: str  # sent only in requests the API refuses

    @classmethod
    def fresh(cls) -> Secrets:
        return cls(*(_secret(name.replace("_", "-")) for name in cls.__dataclass_fields__))

    def values(self) -> list[str]:
        return list(vars(self).values())


@dataclass
class Services:
    rabbitmq: OwnRabbitMQ
    nats: OwnNats
    redis: OwnRedis
    grpc: GrpcConsumer
    http: Receiver
    queue: str
    stream: str

    def addresses(self) -> list[str]:
        ports = (self.rabbitmq.port, self.nats.port, self.redis.port, self.grpc.port)
        return [f"127.0.0.1:{port}" for port in ports]


@contextlib.contextmanager
def _started(*brokers: Any) -> Iterator[None]:
    try:
        for broker in brokers:
            broker.start()
        yield
    finally:
        for broker in brokers:
            broker.stop()


@contextlib.asynccontextmanager
async def services(values: Secrets) -> AsyncIterator[Services]:
    rabbitmq = OwnRabbitMQ(values.amqp_user, values.amqp_password)
    own_nats = OwnNats(token=values.nats_token)
    redis = OwnRedis(password=values.redis_password)
    grpc = GrpcConsumer(free_port(), authorization=values.grpc_authorization)
    with _started(rabbitmq, own_nats, redis):
        queue, stream = "tjobs-e2e-credentials", "TJOBS_E2E_CREDENTIALS"
        amqp = await aiormq.connect(f"amqp://{values.amqp_user}:{values.amqp_password}@127.0.0.1:{rabbitmq.port}/")
        await (await amqp.channel()).queue_declare(queue, durable=True)
        await amqp.close()
        client = await nats.connect(own_nats.url, token=values.nats_token)
        await client.jetstream().add_stream(
            StreamConfig(name=stream, subjects=["tjobs.credentials"], storage=StorageType.FILE)
        )
        await client.close()
        await grpc.start(lambda message: None)
        try:
            async with Receiver() as http:
                yield Services(rabbitmq, own_nats, redis, grpc, http, queue, stream)
        finally:
            await grpc.stop()


def targets(values: Secrets, at: Services) -> dict[str, dict[str, Any]]:
    """Target bodies by name: each protocol with its right credentials, and with wrong ones."""
    amqp = {"url": f"amqp://127.0.0.1:{at.rabbitmq.port}/", "exchange": "", "routing_key": at.queue}
    nats_settings = {"servers": [at.nats.url], "subject": "tjobs.credentials", "stream": at.stream}
    redis = {"url": at.redis.url, "stream": "credentials"}
    grpc = {"address": at.grpc.address, "deadline_ms": 2000}
    retry = {"max_attempts": 3, "backoff_base_ms": 100, "backoff_max_ms": 200}
    bodies = {
        "amqp-right": ("amqp", amqp, {"username": values.amqp_user, "password": values.amqp_password}),
        "amqp-wrong": ("amqp", amqp, {"username": values.amqp_user, "password": values.amqp_wrong_password}),
        "nats-right": ("nats", nats_settings, {"token": values.nats_token}),
        "nats-wrong": ("nats", nats_settings, {"token": values.nats_wrong_token}),
        "redis-right": ("redis_stream", redis, {"password": values.redis_password}),
        "redis-wrong": ("redis_stream", redis, {"password": values.redis_wrong_password}),
        "grpc-right": ("grpc", grpc, {"authorization": values.grpc_authorization}),
        "grpc-wrong": ("grpc", grpc, {"authorization": values.grpc_wrong_authorization}),
        "http-right": ("http", {"url": at.http.url("/due")}, {"authorization": values.http_authorization}),
    }
    return {
        name: {"name": name, "protocol": protocol, "settings": settings, "credentials": credentials, "retry": retry}
        for name, (protocol, settings, credentials) in bodies.items()
    }


async def test_credentials_appear_in_no_answer_no_log_line_and_no_flow_error(tmp_path: Path) -> None:
    values = Secrets.fresh()
    async with services(values) as at:
        with protocol_node(tmp_path / "node", at.addresses()) as node:
            async with AppClient.create(node, "credentials") as app:
                bodies = targets(values, at)
                for body in bodies.values():
                    await app.create_target(body)
                await exercise_the_api(app, bodies, values)
                flows = await fire_and_settle(app, bodies)
                await read_everything(app, flows)
                metrics = await app.call("GET", "/metrics")
                assert metrics.status_code == 200
        log = node.log_path.read_text(errors="replace")  # after the node stopped: its last lines too
        received_http = [request.headers.get("authorization") for request in at.http.requests]

    # the right credentials reached their brokers and receivers; the wrong ones were refused
    for name in bodies:
        statuses = flow_statuses({flow["id"]: flow for flow in flows[name]})
        assert statuses == ({"delivered": TASKS_PER_TARGET} if name.endswith("-right") else {"dead": TASKS_PER_TARGET})
    assert received_http and set(received_http) == {values.http_authorization}
    dead_errors = [flow["last_error"] for name in bodies if name.endswith("-wrong") for flow in flows[name]]
    assert all(dead_errors), dead_errors  # each says why, so there was something to leak into
    print(f"\n[credentials] {len(app.answers)} answers, node.log {len(log):,} chars; dead-letter errors:")
    for error in sorted(set(dead_errors)):
        print(f"  {error}")

    for value in values.values():
        assert value not in log, f"node.log shows {value}"
        leaking = [answer for answer in app.answers if value in answer]
        assert leaking == [], f"{len(leaking)} answers show {value}: {leaking[0][:300]}"


async def exercise_the_api(app: AppClient, bodies: dict[str, dict[str, Any]], values: Secrets) -> None:
    """Read, list and change targets, and send requests the API refuses while carrying a credential."""
    for name in bodies:
        assert (await app.call("GET", f"/v1/targets/{name}")).status_code == 200
    assert (await app.call("GET", "/v1/targets", params={"limit": 100})).status_code == 200
    rotated = {"credentials": {"authorization": values.rotated_http_authorization}}
    assert (await app.call("PATCH", "/v1/targets/http-right", json=rotated)).status_code == 200
    back = {"credentials": {"authorization": values.http_authorization}}
    assert (await app.call("PATCH", "/v1/targets/http-right", json=back)).status_code == 200
    refused = [
        ("PATCH", "/v1/targets/amqp-right", {"credentials": {"token": values.refused_value}}),  # not an AMQP key
        ("POST", "/v1/targets", {**bodies["redis-right"], "name": "bad", "settings": {"url": values.refused_value}}),
        ("POST", "/v1/targets", {**bodies["redis-right"], "name": "bad", "credentials": {"password": 7}}),
        ("POST", "/v1/targets", {**bodies["nats-right"], "name": "nats-right"}),  # exists
        ("POST", "/v1/targets", {**bodies["grpc-right"], "name": "x" * 300}),
        (
            "POST",
            "/v1/targets",
            {**bodies["amqp-right"], "name": "bad", "settings": {"url": f"amqp://u:{values.refused_value}@h:1/"}},
        ),
    ]
    for method, path, body in refused:
        answer = await app.call(method, path, json=body)
        assert answer.status_code in (409, 422), answer.text


async def fire_and_settle(app: AppClient, bodies: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``TASKS_PER_TARGET`` one-shot tasks per target and a multicast task (right and wrong), due at once;
    returns each target's flows once settled (the multicast's under ``"multicast"``)."""
    due_ms = time.time_ns() // 1_000_000 + 2000
    task_ids: dict[str, list[str]] = {}
    for name in [*bodies, "multicast"]:
        callback: dict[str, Any] = {"target": name}
        if name == "multicast":
            callback = {"targets": ["amqp-right", "nats-wrong"]}
        for index in range(TASKS_PER_TARGET if name != "multicast" else 1):
            task = {"name": f"{name}-{index}", "schedule": {"kind": "at", "at_ms": due_ms}, "callback": callback}
            created = await app.call("POST", "/v1/tasks", json=task)
            assert created.status_code == 201, created.text
            task_ids.setdefault(name, []).append(created.json()["id"])
            assert (await app.call("GET", f"/v1/tasks/{created.json()['id']}")).status_code == 200
    every = [task_id for ids in task_ids.values() for task_id in ids]
    settled = await app.await_settled(every, timeout_s=90)
    return {name: [settled[task_id] for task_id in ids] for name, ids in task_ids.items()}


async def read_everything(app: AppClient, flows: dict[str, list[dict[str, Any]]]) -> None:
    """Every read that can show a flow's error or a target: flows one by one, dead letters, stats, SLO."""
    [multicast] = flows["multicast"]
    assert multicast["status"] == "dead" and "nats-wrong" in (multicast["last_error"] or ""), multicast
    for listed in flows.values():
        for flow in listed:
            assert (await app.call("GET", f"/v1/flows/{flow['id']}")).status_code == 200
    assert (await app.call("GET", "/v1/dead-letters", params={"limit": 1000})).status_code == 200
    assert (await app.call("GET", "/v1/stats")).status_code == 200
    assert (await app.call("GET", "/v1/slo")).status_code == 200
