"""Throughput and latency of the Deliverer against a real aiohttp receiver in another process.

    .venv/bin/python -m benchmarks.callbacks --rate 2000 --seconds 10 --in-flight 100 [--reply-delay-ms 0]

Jobs (task, flow, app) are built before the clock starts, then submitted at ``--rate`` per second
from one pacing loop, exactly as the fire path calls :meth:`Deliverer.submit`. The receiver records
the receive time of every callback; latency is receive time minus submit time (same host clock).
``--in-flight`` is the app's concurrency and the global cap. The recorder is a no-op that counts calls.
Not a test (pytest does not collect it): a one-off measurement, printed as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import orjson

from tjobs.clock import SystemClock
from tjobs.delivery.deliverer import CallbackJob, Deliverer
from tjobs.delivery.http import HttpTransport
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.signing import generate_secret
from tjobs.model import (
    App,
    DeliveryMode,
    Flow,
    FlowKind,
    FlowStatus,
    FlowUpdate,
    MisfirePolicy,
    Task,
    TaskStatus,
)
from tjobs.settings import CallbackSettings
from tjobs.specs import AtSpec, CallbackSpec


class CountingRecorder:
    def __init__(self) -> None:
        self.calls = 0
        self.updates = 0

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        self.calls += 1
        self.updates += len(updates)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]


async def run(rate: int, seconds: float, in_flight: int, port: int, freeze: bool) -> dict[str, object]:
    clock = SystemClock()
    settings = CallbackSettings(global_max_in_flight=in_flight, timeout_ms=10_000)
    app = App("bench", "bench", "", [generate_secret()], rate_limit_per_s=1e9, max_concurrency=in_flight)
    url = f"http://127.0.0.1:{port}/cb"
    total = int(rate * seconds)
    base_ms = clock.now_ms()
    jobs = []
    for i in range(total):
        task = Task(
            10_000_000 + i,
            app.id,
            f"bench-{i}",
            None,
            AtSpec(0),
            CallbackSpec((url,)),
            {"i": i},
            MisfirePolicy.FIRE_NOW,
            DeliveryMode.AT_LEAST_ONCE,
            TaskStatus.COMPLETED,
            None,
            1,
            1,
            0,
            0,
        )
        flow = Flow(task.id, base_ms, app.id, FlowKind.SCHEDULED, FlowStatus.PENDING, 0, base_ms, 0, 0)
        jobs.append(CallbackJob(task, flow, app))
    if freeze:
        gc.collect()
        gc.freeze()  # the pre-built jobs are long-lived: keep them out of every collection
    recorder = CountingRecorder()
    sender = HttpTransport(settings)
    limiter = AppLimiter(settings.global_max_in_flight)
    deliverer = Deliverer(recorder, sender, limiter, settings, clock)
    await deliverer.start()
    submit_ns: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/_cpu") as resp:
        receiver_cpu_before = orjson.loads(await resp.read())["cpu_s"]
    cpu_before = time.process_time()
    started = loop.time()
    submitted = 0
    in_flight_samples: list[int] = []
    while submitted < total:
        due = min(total, int((loop.time() - started) * rate) + 1)
        while submitted < due:
            job = jobs[submitted]
            submit_ns[job.flow.id] = time.time_ns()
            deliverer.submit(job)
            submitted += 1
        in_flight_samples.append(limiter.in_flight())
        await asyncio.sleep(0.001)
    submit_done = loop.time()
    while deliverer.in_flight_count():  # noqa: ASYNC110 - polling a measurement, not waiting for an event
        await asyncio.sleep(0.01)
    drained = loop.time()
    cpu_s = time.process_time() - cpu_before
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/_cpu") as resp:
        receiver_cpu_s = orjson.loads(await resp.read())["cpu_s"] - receiver_cpu_before
    await deliverer.stop(5.0)
    await sender.close()
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/_records") as resp:
        records = orjson.loads(await resp.read())
    latencies_ms = sorted((recv_ns - submit_ns[flow_id]) / 1e6 for flow_id, recv_ns in records if flow_id in submit_ns)
    first_submit = min(submit_ns.values())
    last_recv = max(recv_ns for _, recv_ns in records)
    return {
        "rate": rate,
        "seconds": seconds,
        "in_flight_cap": in_flight,
        "submitted": total,
        "received": len(records),
        "submit_s": round(submit_done - started, 3),
        "drain_s": round(drained - submit_done, 3),
        "callbacks_per_s": round(len(records) / ((last_recv - first_submit) / 1e9), 1),
        "latency_ms_p50": round(percentile(latencies_ms, 0.50), 2),
        "latency_ms_p90": round(percentile(latencies_ms, 0.90), 2),
        "latency_ms_p99": round(percentile(latencies_ms, 0.99), 2),
        "latency_ms_max": round(latencies_ms[-1], 2),
        "in_flight_mean": round(sum(in_flight_samples) / len(in_flight_samples), 1),
        "in_flight_peak": max(in_flight_samples),
        "client_cpu_us_per_callback": round(cpu_s / total * 1e6, 1),
        "receiver_cpu_us_per_callback": round(receiver_cpu_s / total * 1e6, 1),
        "recorder_calls": recorder.calls,
        "recorded_updates": recorder.updates,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--reply-delay-ms", type=float, default=0.0)
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() the pre-built jobs")
    args = parser.parse_args()
    receiver = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("receiver.py")), str(args.reply_delay_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        port = int(receiver.stdout.readline())
        import uvloop

        result = uvloop.run(run(args.rate, args.seconds, args.in_flight, port, args.gc_freeze))
        result["reply_delay_ms"] = args.reply_delay_ms
        result["gc_freeze"] = args.gc_freeze
        print(orjson.dumps(result).decode())
    finally:
        assert receiver.stdin is not None
        receiver.stdin.close()
        receiver.wait(10)


if __name__ == "__main__":
    main()
