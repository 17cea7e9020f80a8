"""A node process whose clock is shifted (libfaketime), in a real cluster: 2 MariaDB servers, etcd, Redis.

Node 2 runs with ``FAKETIME`` shifted by +2 s, +30 s or -30 s; node 1 on the machine's clock (which the
MariaDB servers and the receiver share). Node 2 never owns a job, commits no fire, is not ready and
shows its offset; node 1 fires every task: none before its instant by the receiver's (the database's)
clock, none lost, none twice, and late by less than a second.

Then a step: node 2 starts on time and owns half the jobs, and its wall clock steps 30 s ahead or
behind mid-window (a libfaketime timestamp file rewritten; the monotonic clock is left alone, as
``date -s`` leaves it): no fire before its instant, none lost or doubled, node 1 takes its jobs.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx
import pytest

from testkit.cluster_rig import Api, ClusterRig, now_ms
from tests.cluster.workload import collect_when_fired
from tests.receiver import Receiver
from tjobs.clock import iso_ms

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(180)]


def libfaketime() -> Path:
    """Debian's libfaketime, which scripts/services.sh installs: missing, the test fails (never skips)."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime is not installed: scripts/services.sh up installs it (apt-get install libfaketime)")
    return found[0]


TASKS = 100
EVERY_MS = 60


@pytest.mark.parametrize("shift", ["+2s", "+30s", "-30s"])
async def test_a_node_with_a_shifted_clock_refuses_jobs_and_the_other_fires_them_on_time(
    rig: ClusterRig, api: Api, receiver: Receiver, shift: str
) -> None:
    shift_ms = int(shift.removesuffix("s")) * 1000
    rig.start(1)
    await api.wait_healthy(rig.nodes[1])
    rig.start(2, env={"LD_PRELOAD": str(libfaketime()), "FAKETIME": shift, "FAKETIME_DONT_RESET": "1"})
    await api.wait_healthy(rig.nodes[2])
    await api.wait_stable(1)  # one group: the skewed node is not in the plan
    await api.create_app(rig.nodes[1])

    skewed = await api.view(rig.nodes[2])
    assert skewed["fenced"] == "clock" and skewed["owned_jobs"] == 0 and skewed["clock_offset_exceeded"] is True
    assert abs(skewed["clock_offset_ms"] + shift_ms) <= 200, skewed["clock_offset_ms"]
    nodes = {n["id"]: n for n in (await api.view(rig.nodes[1]))["nodes"]}
    assert nodes["node2"]["healthy"] is False and abs(nodes["node2"]["clock_offset_ms"] + shift_ms) <= 200
    assert abs(nodes["node1"]["clock_offset_ms"]) <= 100
    async with httpx.AsyncClient() as http:
        ready = await http.get(f"{rig.nodes[2].base_url}/readyz")
        metrics = (await http.get(f"{rig.nodes[2].base_url}/metrics")).text
    assert ready.status_code == 503 and "clock" in ready.json()["error"]["message"]
    offset = re.search(r"^tjobs_clock_offset_seconds ([-0-9.e+]+)$", metrics, re.M)
    assert offset is not None and abs(float(offset.group(1)) + shift_ms / 1000) <= 0.2

    start = now_ms() + 2500
    tasks: dict[int, int] = {}
    # Through node 1, as a balancer following /readyz would send them: a write served by the skewed node
    # is judged on its clock (operations.md, Clocks).
    for index in range(TASKS):
        at_ms = start + index * EVERY_MS
        tasks[await api.create_at(rig.nodes[1], at_ms, receiver.url(f"/at/{at_ms}"))] = at_ms
    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 8000)
    assert outcome.lost == [] and outcome.duplicated == []
    arrivals = {int(r.path.removeprefix("/at/")): r.received_at_ns // 1_000_000 for r in receiver.requests}
    assert len(receiver.requests) == TASKS and sorted(arrivals) == sorted(tasks.values())
    early = {at: arrived - at for at, arrived in arrivals.items() if arrived < at}
    assert not early, f"fired before the instant (ms): {early}"
    late_ms = sorted(arrived - at for at, arrived in arrivals.items())
    print(f"shift {shift}: offset {skewed['clock_offset_ms']} ms, late p50 {late_ms[TASKS // 2]} max {late_ms[-1]} ms")
    assert late_ms[-1] < 1000, late_ms[-10:]
    assert (await api.view(rig.nodes[2]))["fires_committed"] == 0
    log = rig.nodes[2].log.read_text(errors="replace")
    assert "CLOCK OFFSET" in log

    # Back on time (restarted without the shift): it takes a share again.
    rig.stop(2)
    rig.start(2)
    await api.wait_healthy(rig.nodes[2])
    await api.wait_stable(2)
    deadline = time.monotonic() + 20
    while (await api.view(rig.nodes[2]))["owned_jobs"] == 0:
        assert time.monotonic() < deadline, "the corrected node took no job"
        await asyncio.sleep(0.2)


async def instants_each_to_its_path(
    api: Api, rig: ClusterRig, receiver: Receiver, instants: list[int]
) -> dict[int, int]:
    """An ``at`` task for each instant, created through node 1 in one batch request, each calling back
    ``/at/<instant>``: task id -> instant. (Created one at a time, and then 16 at a time, previews at load 12-14
    stepped the clock after the last of 200 instants over 10 s: the creates had outlasted them, nothing to judge.)
    Each has its own key, so each lands in the shard its key hashes to: a batch puts keyless tasks 32 in a row
    in one shard (``tjobs.service.task_batches``), and the first 1.6 s of instants then all went to one node's
    jobs half the time, the other node firing nothing before the step."""
    tasks = [
        {
            "name": "t",
            "key": f"instant-{at_ms}",
            "schedule": {"kind": "at", "at": iso_ms(at_ms)},
            "callback": {"url": receiver.url(f"/at/{at_ms}")},
            "misfire_policy": "fire_now",
        }
        for at_ms in instants
    ]
    reply = await api.http.post(
        f"{rig.nodes[1].base_url}/v1/tasks/batch",
        json={"tasks": tasks},
        headers={"Authorization": f"Bearer {api.api_key}"},
    )
    reply.raise_for_status()
    items = reply.json()["items"]
    assert [item["status"] for item in items] == [201] * len(instants), items[:3]
    return {int(item["id"]): instants[item["index"]] for item in items}


@pytest.mark.parametrize("step", ["+30s", "-30s"])
async def test_a_node_whose_clock_steps_mid_window_fires_nothing_early_and_the_other_takes_over(
    rig: ClusterRig, api: Api, receiver: Receiver, step: str, tmp_path: Path
) -> None:
    offset_file = tmp_path / "faketime"
    offset_file.write_text("+0s\n")
    rig.start(1)
    rig.start(
        2,
        env={
            "LD_PRELOAD": str(libfaketime()),
            "FAKETIME_TIMESTAMP_FILE": str(offset_file),
            "FAKETIME_CACHE_DURATION": "1",  # the file is read again at most once a second
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1",
        },
    )
    for node in (rig.nodes[1], rig.nodes[2]):
        await api.wait_healthy(node)
    await api.wait_stable(2)
    await api.create_app(rig.nodes[1])
    assert (await api.view(rig.nodes[2]))["owned_jobs"] > 0

    start = now_ms() + 2500
    tasks = await instants_each_to_its_path(api, rig, receiver, [start + index * 50 for index in range(200)])
    await asyncio.sleep(max(start + 3000 - now_ms(), 0) / 1000)
    committed_before = (await api.view(rig.nodes[2]))["fires_committed"]
    assert committed_before > 0, "node 2 fired nothing before the step"
    offset_file.write_text(f"{step}\n")
    stepped_ms = now_ms()

    outcome = await collect_when_fired(api, rig.nodes[1], tasks, 8000)
    assert outcome.lost == [] and outcome.duplicated == []
    arrivals = {int(r.path.removeprefix("/at/")): r.received_at_ns // 1_000_000 for r in receiver.requests}
    assert len(receiver.requests) == len(tasks)
    early = {at: arrived - at for at, arrived in arrivals.items() if arrived < at}
    assert not early, f"fired before the instant (ms): {early}"
    after = sorted(arrived - at for at, arrived in arrivals.items() if at >= stepped_ms)
    assert after, f"no instant was due after the step, {stepped_ms - start} ms after the first: nothing judged"
    print(f"step {step}: late after the step p50 {after[len(after) // 2]} max {after[-1]} ms")
    assert after[-1] < 5000, after[-10:]
    skewed = await api.view(rig.nodes[2])
    assert skewed["owned_jobs"] == 0 and skewed["fenced"] == "clock"
    assert "clock_offset_exceeded" in rig.nodes[2].log.read_text(errors="replace") or "CLOCK OFFSET" in (
        rig.nodes[2].log.read_text(errors="replace")
    )
