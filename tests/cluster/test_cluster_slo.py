"""Cluster-wide service levels (issue 16): with three nodes firing one app's tasks, ``GET /v1/slo?window=``
answers the same numbers on every node, while each node's own view (no ``window``) sees only its fires."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from testkit.cluster_rig import Api, ClusterRig, NodeProc, now_ms
from tests.cluster.workload import collect_when_fired, schedule, start_cluster
from tests.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(240)]

TASKS = 60
FLUSH_S = 1  # slo.flush_s: each node adds its minutes to the store this often (default 60 s)


async def cluster_slo(api: Api, node: NodeProc) -> dict[str, Any]:
    reply = await api.http.get(f"{node.base_url}/v1/slo", params={"window": "1h"}, headers=api._auth())
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def node_slo(api: Api, node: NodeProc) -> dict[str, Any]:
    reply = await api.http.get(f"{node.base_url}/v1/slo", headers=api._auth())
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


async def test_every_node_answers_the_same_cluster_service_levels(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    rig.overrides = {"slo": {"flush_s": FLUSH_S}}
    await start_cluster(rig, api, 3)
    start_ms = now_ms() + 4000
    tasks = await schedule(api, rig.nodes[1], receiver.url(), start_ms, start_ms + 6000, 6000 // TASKS)
    assert len(tasks) == TASKS
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 3000)
    assert outcome.lost == [] and outcome.duplicated == []
    senders = {request.headers.get("user-agent") for request in receiver.requests}
    assert senders == {f"tjobs-rig/node{index}" for index in (1, 2, 3)}, senders  # every node fired some

    # Every node's minutes reach the store within a flush or two; then all three answer alike.
    deadline = time.monotonic() + 20 * FLUSH_S + 10
    answers: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        answers = [await cluster_slo(api, node) for node in rig.live()]
        if all(answer["fires"] >= TASKS and answer["reach"]["delivered"] >= TASKS for answer in answers):
            break
        await asyncio.sleep(0.5)
    first = answers[0]
    assert first["scope"] == "cluster" and first["fires"] == TASKS, first
    assert first["reach"] == {"delivered": TASKS, "dead": 0, "ratio": 1.0, "met": True}, first
    assert first["commit_lateness"]["count"] == TASKS and first["commit_lateness"]["p99_s"] is not None, first
    assert first["delivery_lateness"]["count"] == TASKS and first["delivery_lateness"]["p99_s"] is not None, first
    for answer in answers[1:]:  # asked within the same minute, or the window moved: ask again
        if answer["from"] != first["from"]:
            answers = [await cluster_slo(api, node) for node in rig.live()]
            break
    assert all(answer == answers[0] for answer in answers), answers

    # A node alone sees only what it fired: the three views add up to the cluster's.
    own = [await node_slo(api, node) for node in rig.live()]
    own_delivered = [view["reach"]["delivered"] for view in own]
    assert sum(own_delivered) == TASKS and all(0 < count < TASKS for count in own_delivered), own_delivered
