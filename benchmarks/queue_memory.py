"""``python -m benchmarks queue_memory``: the memory of a delivery queued behind a rate-limited app.

A daily batch of one-shot tasks for an app with a ``rate_limit_per_s`` or ``max_concurrency`` waits in the
memory of the node that fired it until the app's limits let it out (docs/operations.md, "A backlog behind a
slow or rate-limited app"). This builds ``--deliveries`` committed fires of one app as the fire path hands them
to the deliverer (a task and its flow each, with fresh strings and a small JSON payload, as read from a row),
submits them to a deliverer whose one attempt under way never answers (``max_concurrency`` 1), so all the
others wait in the app's queue, and traces (``tracemalloc``) what the deliverer keeps per queued delivery,
apart from the task and flow it was handed. Then the same with a queue that keeps one delivery in memory, so the
others are spilled (:mod:`tjobs.delivery.spill`: they wait in the store) and the deliverer keeps only what it
needs to take each back, and not its task and flow. ``tracemalloc`` counts requested sizes, so the figures are exact
and the same on every run of a tree (no noise: A/B at any time). Run::

    python -m benchmarks queue_memory --deliveries 20000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import tracemalloc
from dataclasses import replace
from typing import Any

from sharding import TaskIdGenerator
from tjobs.clock import ManualClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import RecordingTransport
from tjobs.delivery.signing import generate_secret
from tjobs.model import App, DeliveryMode, Flow, FlowKind, FlowStatus, MisfirePolicy, Task, TaskStatus
from tjobs.settings import CallbackSettings
from tjobs.specs import AtSpec, CallbackSpec
from tjobs.stores.memory import MemoryTaskStore

NOW_MS = 1_796_000_000_000
APP = App("shop", "shop", "", [generate_secret()], rate_limit_per_s=50.0, max_concurrency=1)


def fires(count: int, app: App = APP) -> list[CallbackJob]:
    """``count`` committed fires of one-shot tasks due at one instant, each its own objects (as read from rows)."""
    ids = TaskIdGenerator(512)
    jobs = []
    for index in range(count):
        task_id = ids.mint(ids.random_shard(), NOW_MS - index)
        task = Task(
            task_id,
            APP.id,
            f"close-order-{index}",
            None,
            AtSpec(NOW_MS),
            CallbackSpec((f"https://orders.example.com/hooks/close?shop={index % 100}",)),
            {"order_id": 100_000_000 + index, "action": "close"},
            MisfirePolicy.FIRE_NOW,
            DeliveryMode.AT_LEAST_ONCE,
            TaskStatus.COMPLETED,
            None,
            2,
            1,
            NOW_MS - 1_800_000,
            NOW_MS,
        )
        flow = Flow(task_id, NOW_MS, APP.id, FlowKind.SCHEDULED, FlowStatus.PENDING, 0, NOW_MS, NOW_MS, NOW_MS)
        jobs.append(CallbackJob(task, flow, app))
    return jobs


async def measure(deliveries: int) -> dict[str, Any]:
    """The bytes a queued delivery and a spilled flow keep on the node (see the module)."""
    queued = await _kept(deliveries, APP, keep_in_memory=deliveries)
    # an app whose queue keeps one delivery: a rate limit would keep what it sends in 2 minutes (lanes.KEEP_AHEAD_MS)
    spilled = await _kept(deliveries, replace(APP, rate_limit_per_s=0.0), keep_in_memory=1)
    return {
        "deliveries": deliveries,
        "queued": queued["queued"],
        "task_and_flow_bytes": queued["task_and_flow_bytes"],
        "bytes_per_queued_delivery": queued["bytes"],
        "spilled": spilled["spilled"],
        "bytes_per_spilled_flow": spilled["bytes"],
    }


async def _kept(deliveries: int, app: App, keep_in_memory: int) -> dict[str, Any]:
    clock = ManualClock(NOW_MS)
    transport = RecordingTransport(CallbackSettings(), clock)
    transport.hold = asyncio.Event()  # the first attempt never answers: the rest stay queued or spilled
    settings = CallbackSettings()
    deliverer = Deliverer(MemoryTaskStore(), transport, AppLimiter(100), settings, clock, keep_in_memory=keep_in_memory)
    await deliverer.start()
    try:
        gc.collect()
        tracemalloc.start()
        before_jobs = tracemalloc.get_traced_memory()[0]
        jobs = fires(deliveries, app)
        gc.collect()
        before_queue = tracemalloc.get_traced_memory()[0]
        for job in jobs:
            deliverer.submit(job)
        await transport.wait_for(1)
        gc.collect()
        queued_bytes = tracemalloc.get_traced_memory()[0] - before_queue
        tracemalloc.stop()
        queued, spilled = deliverer.backlog, len(deliverer.spill)
        if queued != deliveries - 1 or spilled != (0 if keep_in_memory >= deliveries else deliveries - 1):
            raise AssertionError(f"{queued} queued of {deliveries - 1}, {spilled} of them spilled")
        return {
            "queued": queued,
            "spilled": spilled,
            "task_and_flow_bytes": round((before_queue - before_jobs) / deliveries, 1),
            "bytes": round(queued_bytes / deliveries, 1),
        }
    finally:
        transport.hold.set()
        await deliverer.stop(1.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks queue_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=20_000, help="fires queued behind one app (default 20000)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (the default prints them too)")
    args = parser.parse_args(argv)
    if args.deliveries < 2:
        parser.error("--deliveries: at least 2 (one under way, the rest queued)")
    print(json.dumps(asyncio.run(measure(args.deliveries)), indent=2))


if __name__ == "__main__":
    main()
