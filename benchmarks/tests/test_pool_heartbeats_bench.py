"""The heartbeat bench's client: every heartbeat sent is answered and counted, failures by status."""

from __future__ import annotations

import time

import httpx

from benchmarks.pool_heartbeats import POOL, _heartbeats
from testkit import run_node
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.settings import load_settings


async def test_the_lean_client_sends_each_heartbeat_on_schedule_and_counts_the_answers() -> None:
    settings = load_settings(None, storage={"urls": ["memory://"], "topology": "1x1x4"}, **FAST_SETTINGS)
    async with run_node(settings) as running:
        _, key = await running.create_app("beats")
        async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
            for name in ("e0", "e1"):
                made = await client.post(
                    f"/v1/pools/{POOL}/executors", json={"id": name, "address": "http://127.0.0.1:9"}
                )
                assert made.status_code == 201
        # three ids every 0.3 s for 0.85 s over two connections: nine heartbeats, the unknown one's 404
        beats = await _heartbeats(running.base_url, key, ["e0", "e1", "nobody"], 0.3, 0.85, connections=2)
        assert beats["heartbeats"] == 9
        assert beats["failures"] == {"404": 3}
        assert running.api.state.lean_paths.served == 9


def test_the_exact_cpu_account_names_each_thread_and_counts_only_what_came_after() -> None:
    import os
    import threading

    from testkit.node_process import threads_cpu

    done = threading.Event()
    spun = threading.Event()

    def spin() -> None:
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass
        spun.set()
        done.wait(5)

    before = threads_cpu(os.getpid())
    assert before is not None and "main" in before.run_ns
    worker = threading.Thread(target=spin)
    worker.start()
    while worker.native_id is None:
        time.sleep(0.001)
    assert spun.wait(10)  # its 50 ms of CPU spun (a wall-clock sleep was not enough beside a loaded run: 36.6 ms)
    after = threads_cpu(os.getpid())
    done.set()
    worker.join()
    assert after is not None
    used = after.since(before)
    others = sum(ns for name, ns in used.run_ns.items() if name != "main")  # Python names no OS thread
    assert others >= 50_000_000  # the spinner, a new thread: all of its time counts
    assert used.run_ns["main"] < after.run_ns["main"]  # the main thread: only what came after
    assert used.total_s == sum(used.run_ns.values()) / 1e9
    assert all(vol >= 0 and inv >= 0 for vol, inv in used.switches.values())
