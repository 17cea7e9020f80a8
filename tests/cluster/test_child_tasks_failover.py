"""Child tasks under failover (README "Child tasks", issue 30 item 3): two nodes on etcd, two MariaDB servers
and Redis. Parents whose shards the victim node owns (on one MariaDB server) accept their instant's send as
a run; their children (delivery-only, answering 200) live in shards of the other server, wherever the plan
puts their owners. Fan-out: ``p -> x1, x2, x3``; fan-in: ``a, b -> c`` and ``a2, b2 -> c2`` (``b2`` fails);
``f`` names ``s`` on success and ``g`` on failure, and its run fails (``max_attempts`` 1: it ends ``dead``).

Child triggers are made pending at the fault deterministically: the children's MariaDB server is
SIGSTOP'd while the victim takes the final reports of ``p`` (and ``f``, ``b`` in the second test), so
each ending is written (with its mark that its children are due) on the parents' server and the victim's
trigger hangs on the children's; then the victim is killed -9 (or SIGSTOP'd past its 5 s lease, and
resumed once the survivor has run the children), and the server resumed. Runs still live at the kill are
reported to the survivor.

Counted exactly, from the receiver and from the store: each child runs once at its parents' instant with
the documented payload (a parent's run result; fan-in: ``{parent id: result}``, only after every parent
succeeded), none twice, none for a parent that failed unless ``on_failure`` names it; and the pending
children were run by the survivor (its compensator, from the stored endings), not by the victim."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable
from typing import Any

import httpx
import orjson
import pytest

from sharding import shard_for_key
from testkit.cluster_rig import ADMIN_AUTH, Api, ClusterRig, Infra, NodeProc, now_ms
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(240)]

ACCEPTED = Reply(202, headers={"tjobs-run": "accepted"})
SHARDS = 16  # the rig's topology, 2x2x4
PARENTS = ("p", "a", "b", "f", "a2", "b2")
CHILDREN = ("x1", "x2", "x3", "c", "c2", "s", "g")
FAMILY = {  # parent -> its children
    "p": {"on_success": ["x1", "x2", "x3"]},
    "a": {"on_success": ["c"]},
    "b": {"on_success": ["c"]},
    "a2": {"on_success": ["c2"]},
    "b2": {"on_success": ["c2"]},
    "f": {"on_success": ["s"], "on_failure": ["g"]},
}
RESULTS: dict[str, tuple[str, Any]] = {  # parent -> its run's final report
    "p": ("succeeded", {"rows": 3}),
    "a": ("succeeded", {"part": "a"}),
    "b": ("succeeded", {"part": "b"}),
    "a2": ("succeeded", {"part": "a2"}),
    "b2": ("failed", {"error": "b2"}),
    "f": ("failed", {"error": "boom"}),
}


class Family:
    """The tasks of one test, the instant their parents share, and the rig's nodes by role."""

    victim: NodeProc  # chosen by create
    survivor: NodeProc

    def __init__(self, rig: ClusterRig, api: Api, receiver: Receiver) -> None:
        self.rig, self.api, self.receiver = rig, api, receiver
        self.ids: dict[str, int] = {}
        self.at_ms = 0
        self.children_server = 1

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api.api_key}"}

    async def create(self, parents: tuple[str, ...]) -> None:
        """Two nodes; the app; children keyed into the other server's shards, then ``parents`` (an ``at``
        task each, at one instant ~3 s ahead) keyed into shards the victim owns on one server."""
        for index in (1, 2):
            self.rig.start(index)
        for node in self.rig.live():
            await self.api.wait_healthy(node)
        await self.api.wait_stable(2)
        body = {"name": "rig", "rate_limit_per_s": 100000, "max_concurrency": 1000}
        made = await self.api.http.post(f"{self.rig.nodes[1].base_url}/v1/apps", json=body, headers=ADMIN_AUTH)
        made.raise_for_status()
        self.api.api_key, app_id = made.json()["api_key"], made.json()["id"]
        # The parents on server 0, the children on server 1 (server 0 holds the first database: the apps
        # and the reverse index of child tasks, which every node reads); the victim, the node owning more
        # of server 0's shards
        parents_server = set(self.rig.shards_of_server(0))
        jobs = {node.index: set((await self.api.view(node))["jobs"]) for node in self.rig.live()}
        victim = max(jobs, key=lambda index: len(jobs[index] & parents_server))
        self.victim, self.survivor = self.rig.nodes[victim], self.rig.nodes[3 - victim]
        parent_shards = jobs[victim] & parents_server
        for name in CHILDREN:
            key = _key_in(app_id, set(self.rig.shards_of_server(self.children_server)), name)
            task = {"name": name, "key": key, "schedule": {"kind": "delay", "delay_ms": 86_400_000}}
            self.ids[name] = await self._post({**task, "callback": {"url": self.receiver.url(f"/{name}")}})
        self.at_ms = (now_ms() // 1000 + 3) * 1000
        for name in parents:
            self.receiver.script(f"/{name}", then=ACCEPTED)
            callback = {"url": self.receiver.url(f"/{name}"), "run_timeout_ms": 120_000, "max_attempts": 1}
            children = {relation: [self.ids[c] for c in names] for relation, names in FAMILY[name].items()}
            task = {
                "name": name,
                "key": _key_in(app_id, parent_shards, name),
                "schedule": {"kind": "at", "at_ms": self.at_ms},
                "callback": callback,
                "children": children,
            }
            self.ids[name] = await self._post(task)

    async def _post(self, task: dict[str, Any]) -> int:
        reply = await self.api.http.post(f"{self.survivor.base_url}/v1/tasks", json=task, headers=self.auth)
        assert reply.status_code == 201, reply.text
        return int(reply.json()["id"])

    def flow_id(self, name: str) -> str:
        return f"{self.ids[name]}-{self.at_ms}"

    async def flows(self, name: str, via: NodeProc | None = None) -> list[dict[str, Any]]:
        """The task's flows as listed (a listing reads only the task's own shard)."""
        return await self.api.flows(via or self.survivor, self.ids[name])

    async def until(self, names: tuple[str, ...], status: str, timeout_s: float = 15.0) -> None:
        """Until each of ``names`` has its one flow in ``status``."""
        deadline = time.monotonic() + timeout_s
        for name in names:
            while [f["status"] for f in await self.flows(name)] != [status]:
                assert time.monotonic() < deadline, (name, status, await self.flows(name))
                await asyncio.sleep(0.05)

    async def runs_live(self, parents: tuple[str, ...]) -> None:
        """Each parent's run was accepted by its receiver and is ``running`` in the store."""
        for name in parents:
            await self.receiver.wait_for(1, path=f"/{name}", timeout_s=20)
        await self.until(parents, "running")

    def report(self, name: str, node: NodeProc, timeout_s: float = 10.0) -> Awaitable[httpx.Response]:
        status, result = RESULTS[name]
        body = {"status": status, "attempt": 1, "result": result}
        url = f"{node.base_url}/v1/flows/{self.flow_id(name)}/report"
        return self.api.http.post(url, json=body, headers=self.auth, timeout=timeout_s)

    async def reported(self, name: str, node: NodeProc) -> None:
        reply = await self.report(name, node)
        assert reply.status_code == 200, reply.text

    def stop_children_server(self) -> None:
        self.rig.infra.signal_service(Infra.mariadb(self.children_server), signal.SIGSTOP)

    def resume_children_server(self) -> None:
        self.rig.infra.signal_service(Infra.mariadb(self.children_server), signal.SIGCONT)

    def sent(self, name: str) -> list[dict[str, Any]]:
        """What each send of child ``name`` carried: its flow id, its payload, the node that sent it."""
        return [
            {"flow": r.flow_id, "payload": orjson.loads(r.body)["payload"], "by": r.headers.get("user-agent")}
            for r in self.receiver.for_path(f"/{name}")
        ]

    def joined(self, *names: str) -> dict[str, Any]:
        return {str(self.ids[name]): RESULTS[name][1] for name in names}

    async def child_flows(self, name: str) -> list[dict[str, Any]]:
        return [
            {"id": f["id"], "kind": f["kind"], "status": f["status"], "payload": f.get("payload")}
            for f in await self.flows(name)
        ]


def _key_in(app_id: str, shards: set[int], name: str) -> str:
    """A task key whose shard is one of ``shards`` (a keyed task lives in its key's shard)."""
    return next(f"{name}-{n}" for n in range(10_000) if shard_for_key(app_id, f"{name}-{n}", SHARDS) in shards)


async def _until_sent(family: Family, counts: dict[str, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for name, count in counts.items():
        await family.receiver.wait_for(count, path=f"/{name}", timeout_s=max(deadline - time.monotonic(), 0.1))


async def test_children_run_once_though_the_parents_owner_is_killed_with_runs_live_and_triggers_pending(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    family = Family(rig, api, receiver)
    await family.create(PARENTS)
    victim, survivor = family.victim, family.survivor
    await family.runs_live(PARENTS)

    # Given a's and a2's runs succeeded on the victim (c and c2 wait for b and b2, still running)
    await family.reported("a", victim)
    await family.reported("a2", victim)
    await family.until(("a", "a2"), "delivered")
    # And p's success and f's failure written on the victim while the children's server is stopped, so
    # their children's triggers hang there, pending
    family.stop_children_server()
    try:
        hanging = [asyncio.ensure_future(family.report(name, victim, timeout_s=30)) for name in ("p", "f")]
        await family.until(("p",), "delivered")
        await family.until(("f",), "dead")
        # When the victim is killed -9 with b's and b2's runs live and those triggers pending
        rig.kill(victim.index)
        killed_ms = now_ms()
    finally:
        family.resume_children_server()
    await asyncio.gather(*hanging, return_exceptions=True)
    await api.wait_stable(1, timeout_s=30)
    early = {name: family.sent(name) for name in ("c", "c2")}
    # And b's success and b2's failure are reported to the survivor
    await family.reported("b", survivor)
    await family.reported("b2", survivor)
    await _until_sent(family, {"x1": 1, "x2": 1, "x3": 1, "g": 1, "c": 1}, timeout_s=25)
    await asyncio.sleep(2.0)  # room for a second send or a phantom child (compensator every 1 s)

    # Then each child ran once, from the survivor, with its parents' results; s and c2 never
    by = f"tjobs-rig/node{survivor.index}"
    for name in ("x1", "x2", "x3"):
        assert family.sent(name) == [{"flow": f"{family.ids[name]}-{family.at_ms}", "payload": {"rows": 3}, "by": by}]
    assert early == {"c": [], "c2": []}
    assert family.sent("c") == [
        {"flow": f"{family.ids['c']}-{family.at_ms}", "payload": family.joined("a", "b"), "by": by}
    ]
    assert family.sent("g") == [{"flow": f"{family.ids['g']}-{family.at_ms}", "payload": {"error": "boom"}, "by": by}]
    assert family.sent("s") == [] and family.sent("c2") == []
    # And the store holds one manual flow per child at the parents' instant, none for s and c2
    for name in ("x1", "x2", "x3", "c", "g"):
        [flow] = await family.child_flows(name)
        assert flow["id"] == f"{family.ids[name]}-{family.at_ms}" and flow["kind"] == "manual", flow
        assert flow["status"] == "delivered", flow
    assert await family.flows("s") == [] and await family.flows("c2") == []
    statuses = {name: [f["status"] for f in await family.flows(name)] for name in PARENTS}
    assert statuses == {"p": ["delivered"], "a": ["delivered"], "b": ["delivered"], "f": ["dead"],
                        "a2": ["delivered"], "b2": ["dead"]}  # fmt: skip
    # And the pending ones were triggered from the stored endings after the kill
    log = survivor.log.read_text(errors="replace")
    for name in ("p", "f"):
        assert f"triggering the children of flow {family.flow_id(name)} again" in log, name
    child = (await api.http.get(f"{survivor.base_url}/v1/flows/{family.flow_id('c')}", headers=family.auth)).json()
    assert sorted(child["parent_flows"]) == sorted([family.flow_id("a"), family.flow_id("b")]), child
    assert killed_ms < min(r.received_at_ns // 1_000_000 for r in receiver.for_path("/x1"))


async def test_a_node_stopped_past_its_lease_with_triggers_pending_runs_no_child_twice_once_resumed(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    parents = ("p", "a", "b")
    family = Family(rig, api, receiver)
    await family.create(parents)
    victim, survivor = family.victim, family.survivor
    await family.runs_live(parents)

    # Given a's run succeeded on the victim, and p's and b's while the children's server is stopped
    await family.reported("a", victim)
    await family.until(("a",), "delivered")
    family.stop_children_server()
    try:
        hanging = [asyncio.ensure_future(family.report(name, victim, timeout_s=60)) for name in ("p", "b")]
        await family.until(("p", "b"), "delivered")
        # When the victim is stopped with those triggers pending, past its lease (5 s)
        rig.signal(victim.index, signal.SIGSTOP)
    finally:
        family.resume_children_server()
    try:
        # Then the survivor takes its shards over and runs the children from the stored endings
        await _until_sent(family, {"x1": 1, "x2": 1, "x3": 1, "c": 1}, timeout_s=25)
    finally:
        rig.signal(victim.index, signal.SIGCONT)
    # And the victim, resumed, finishes its stalled triggers: its reports are answered, and no child runs again
    answers = await asyncio.gather(*hanging, return_exceptions=True)
    await asyncio.sleep(2.0)

    by = f"tjobs-rig/node{survivor.index}"
    for name in ("x1", "x2", "x3"):
        assert family.sent(name) == [{"flow": f"{family.ids[name]}-{family.at_ms}", "payload": {"rows": 3}, "by": by}]
    assert family.sent("c") == [
        {"flow": f"{family.ids['c']}-{family.at_ms}", "payload": family.joined("a", "b"), "by": by}
    ]
    for name in ("x1", "x2", "x3", "c"):
        [flow] = await family.child_flows(name)
        assert flow["id"] == f"{family.ids[name]}-{family.at_ms}" and flow["status"] == "delivered", flow
    for answer in answers:
        assert isinstance(answer, httpx.Response) and answer.status_code == 200, answer
        assert answer.json()["status"] == "delivered", answer.text
    # And the children came from the survivor's compensator, the victim's late triggers finding them there
    log = survivor.log.read_text(errors="replace")
    for name in ("p", "b"):
        assert f"triggering the children of flow {family.flow_id(name)} again" in log, name
    assert "triggered child flow" not in victim.log.read_text(errors="replace")
