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
children were run by the survivor (its compensator, from the stored endings), not by the victim.

The third test has recurring parents (``q1 -> y1, y2``; ``q1, q2 -> z``; a cron every second for 14 s,
delivery-only, the answer's body their result) whose owner is killed -9 mid-window, with sends, outcomes
and child triggers in flight wherever the kill lands: every parent instant is delivered, each child has
exactly one flow per instant its parents delivered (``z``: both), none other, each sent with the answers as
payload; a child flow is sent a second time only where the victim's send was cut by the kill and the
survivor's compensator sent it again with a higher attempt (at least once; receivers deduplicate on
``webhook-id``)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Awaitable
from typing import Any

import httpx
import orjson
import pytest

from sharding import shard_for_key, shard_of_task_id
from testkit.cluster_rig import ADMIN_AUTH, Api, ClusterRig, Infra, NodeProc, now_ms
from tests.receiver import Receiver, Reply
from tjobs.clock import iso_ms
from tjobs.model import FlowStatus

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
        self.app_id = ""
        self.parent_shards: set[int] = set()
        self.child_shards: list[set[int]] = []

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api.api_key}"}

    async def start(self) -> None:
        """Two nodes; the app; the victim, the node owning more of MariaDB server 0's shards. The parents go
        to the victim's shards there, the children to server 1's (server 0 holds the first database: the
        apps and the reverse index of child tasks, which every node reads), each of the victim's and the
        survivor's in turn where both own some."""
        for index in (1, 2):
            self.rig.start(index)
        for node in self.rig.live():
            await self.api.wait_healthy(node)
        await self.api.wait_stable(2)
        body = {"name": "rig", "rate_limit_per_s": 100000, "max_concurrency": 1000}
        made = await self.api.http.post(f"{self.rig.nodes[1].base_url}/v1/apps", json=body, headers=ADMIN_AUTH)
        made.raise_for_status()
        self.api.api_key, self.app_id = made.json()["api_key"], str(made.json()["id"])
        first, other = set(self.rig.shards_of_server(0)), set(self.rig.shards_of_server(self.children_server))
        jobs = await self._jobs_covering(first | other)
        victim = max(jobs, key=lambda index: len(jobs[index] & first))
        self.victim, self.survivor = self.rig.nodes[victim], self.rig.nodes[3 - victim]
        self.parent_shards = jobs[victim] & first
        self.child_shards = [shards for shards in (other & jobs[victim], other - jobs[victim]) if shards]

    async def _jobs_covering(self, shards: set[int], timeout_s: float = 30.0) -> dict[int, set[int]]:
        """Each live node's jobs, read until together they own every one of ``shards``: a view read while a group
        changed hands after the plan was stable (CI, 2026-12-07: neither node owned a shard of server 0) names
        no victim's shards to key the parents into."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = {node.index: set((await self.api.view(node))["jobs"]) for node in self.rig.live()}
            if shards <= set().union(*jobs.values()):
                return jobs
            assert time.monotonic() < deadline, f"the nodes' jobs {jobs} never covered {sorted(shards)}"
            await asyncio.sleep(0.2)

    async def add_children(self, names: tuple[str, ...]) -> None:
        """Delivery-only tasks (their own schedule a day away), answered 200 by the receiver."""
        for number, name in enumerate(names):
            key = _key_in(self.app_id, self.child_shards[number % len(self.child_shards)], name)
            task = {"name": name, "key": key, "schedule": {"kind": "delay", "delay_ms": 86_400_000}}
            self.ids[name] = await self._post({**task, "callback": {"url": self.receiver.url(f"/{name}")}})

    async def add_parent(
        self, name: str, schedule: dict[str, Any], callback: dict[str, Any], children: dict[str, list[str]]
    ) -> None:
        task = {
            "name": name,
            "key": _key_in(self.app_id, self.parent_shards, name),
            "schedule": schedule,
            "callback": {"url": self.receiver.url(f"/{name}"), **callback},
            "children": {relation: [self.ids[c] for c in names] for relation, names in children.items()},
        }
        self.ids[name] = await self._post(task)

    async def create(self, parents: tuple[str, ...]) -> None:
        """:meth:`start`; the children; ``parents``, an ``at`` task each at one instant ~3 s ahead, whose
        sends the receiver accepts as runs."""
        await self.start()
        await self.add_children(CHILDREN)
        self.at_ms = (now_ms() // 1000 + 3) * 1000
        for name in parents:
            self.receiver.script(f"/{name}", then=ACCEPTED)
            callback = {"run_timeout_ms": 120_000, "max_attempts": 1}
            await self.add_parent(name, {"kind": "at", "at_ms": self.at_ms}, callback, FAMILY[name])

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
        """A fan-in child's payload: its parents' run results by parent id."""
        return {str(self.ids[name]): RESULTS[name][1] for name in names}

    def joined_answers(self, *names: str) -> dict[str, Any]:
        """A fan-in child's payload where each parent's answer body was ``{"from": <its name>}``."""
        return {str(self.ids[name]): {"from": name} for name in names}

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


def _instant(flow_id: str) -> int:
    return int(flow_id.rpartition("-")[2])


async def test_recurring_parents_trigger_their_children_once_per_instant_across_a_kill_of_their_owner(
    rig: ClusterRig, api: Api, receiver: Receiver
) -> None:
    family = Family(rig, api, receiver)
    await family.start()
    victim, survivor = family.victim, family.survivor
    await family.add_children(("y1", "y2", "z"))
    # Given q1 -> y1, y2 and q1, q2 -> z, both firing every second over 14 s, answered 200 with a body
    start_ms = (now_ms() // 1000 + 2) * 1000
    end_ms = start_ms + 14_000
    schedule = {"kind": "cron", "expr": "* * * * * *", "start_at": iso_ms(start_ms), "end_at": iso_ms(end_ms)}
    for name, children in (("q1", ["y1", "y2", "z"]), ("q2", ["z"])):
        receiver.script(f"/{name}", then=Reply(200, body=orjson.dumps({"from": name})))
        await family.add_parent(name, schedule, {}, {"on_success": children})
    # When their owner is killed -9 mid-window (sends, outcomes and child triggers in flight)
    await asyncio.sleep(max(start_ms + 3_500 - now_ms(), 0) / 1000)
    rig.kill(victim.index)
    killed_ms = now_ms()

    # Then (once the window is over and everything has ended) every instant of each parent was delivered
    async def state() -> dict[str, list[dict[str, Any]]]:
        return {name: await family.flows(name) for name in ("q1", "q2", "y1", "y2", "z")}

    def owed(flows: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
        """The parents' delivered instants, and the instants each child is owed by them."""
        parents = {
            name: {_instant(f["id"]) for f in flows[name] if f["status"] == "delivered"} for name in ("q1", "q2")
        }
        return parents, {"y1": parents["q1"], "y2": parents["q1"], "z": parents["q1"] & parents["q2"]}

    deadline = time.monotonic() + (end_ms - now_ms()) / 1000 + 20
    while True:
        flows = await state()
        parents, due = owed(flows)
        ended = all(FlowStatus(f["status"]).terminal for fs in flows.values() for f in fs)
        if now_ms() > end_ms and ended and all(len(flows[name]) == len(due[name]) for name in due):
            break
        assert time.monotonic() < deadline, flows
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)  # room for a late duplicate or phantom child
    flows = await state()
    parents, due = owed(flows)

    expected = set(range(start_ms, end_ms + 1, 1000))
    assert parents["q1"] == parents["q2"] and expected - {end_ms} <= parents["q1"] <= expected, parents
    assert all(f["status"] == "delivered" for name in ("q1", "q2") for f in flows[name]), flows
    # And each child has one manual flow per delivered instant of its parents (z: of both), no other
    for name, instants in due.items():
        assert sorted(_instant(f["id"]) for f in flows[name]) == sorted(instants), (name, flows[name])
        assert all(f["kind"] == "manual" and f["status"] == "delivered" for f in flows[name]), flows[name]
    # And each was sent with its parents' answers as payload; a flow sent twice only where the victim's send
    # was cut by the kill and the survivor sent it again with a higher attempt (receivers dedupe on webhook-id)
    payloads = {"y1": {"from": "q1"}, "y2": {"from": "q1"}, "z": family.joined_answers("q1", "q2")}
    victim_agent, survivor_agent = f"tjobs-rig/node{victim.index}", f"tjobs-rig/node{survivor.index}"
    again: list[str] = []
    for name, instants in due.items():
        sends = receiver.for_path(f"/{name}")
        assert {_instant(r.flow_id) for r in sends} == instants, name
        for flow_id in {r.flow_id for r in sends}:
            same = [r for r in sends if r.flow_id == flow_id]
            assert all(orjson.loads(r.body)["payload"] == payloads[name] for r in same), (name, same)
            first, *later = same
            if later:
                again.append(flow_id)
                assert first.headers.get("user-agent") == victim_agent, same
                assert first.received_at_ns // 1_000_000 <= killed_ms, same
                assert all(r.headers.get("user-agent") == survivor_agent for r in later), same
                assert all(r.attempt > first.attempt for r in later), same
    # And the kill was mid-window: each node sent some of the parents' instants
    agents = {r.headers.get("user-agent") for name in ("q1", "q2") for r in receiver.for_path(f"/{name}")}
    assert agents == {victim_agent, survivor_agent}, (agents, again)
    sent_by = Counter(r.headers.get("user-agent") for name in due for r in receiver.for_path(f"/{name}"))
    in_victims = [name for name in due if shard_of_task_id(family.ids[name]) in family.child_shards[0]]
    print(f"instants {len(parents['q1'])}, child sends by node {dict(sent_by)}, sent again {again}, ", end="")
    print(f"children in the victim's shards {in_victims if len(family.child_shards) == 2 else 'all or none'}")
