"""New apps' first creates (and stats reads) while another app's timers fire every second.

::

    python -m benchmarks.first_creates --storage mysql+asyncmy://root@127.0.0.1:3306   # 8x4x16 shards
    python -m benchmarks.first_creates                                                # embedded (SQLite)

A node runs in a child process (:mod:`testkit.node_process`; on MariaDB under a fresh database
prefix, dropped afterwards). One app registers ``--timers`` interval tasks firing every second to a
receiver in this process, which records each callback's lateness (arrival minus ``tjobs-scheduled-at``).
Once they fire steadily, ``--apps`` apps are created, then every app's first create runs at once, then
every app's ``GET /v1/stats`` at once. Printed as JSON: the create and stats latencies (p50/p99/max)
and the lateness of the fires due in the quiet window before and in the window around the requests
(a request unanswered within 60 s counts as status 0 at the time it was given up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web

from benchmarks.fire import create_bench_app
from testkit.node_process import node_process
from testkit.ports import free_port

EVERY_MS = 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


@dataclass
class Latencies:
    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_100_ms: int

    @classmethod
    def of(cls, values_ms: Sequence[float]) -> Latencies:
        return cls(
            len(values_ms),
            quantile(values_ms, 0.5),
            quantile(values_ms, 0.99),
            max(values_ms) if values_ms else None,
            sum(1 for v in values_ms if v > 100),
        )


class Receiver:
    """Records (scheduled_at_ms, lateness_ms) of every callback."""

    def __init__(self) -> None:
        self.fires: list[tuple[int, int]] = []
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def _hook(self, request: web.Request) -> web.Response:
        scheduled = int(request.headers["tjobs-scheduled-at"])
        self.fires.append((scheduled, now_ms() - scheduled))
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def lateness(self, from_ms: int, to_ms: int) -> Latencies:
        return Latencies.of([float(late) for at, late in self.fires if from_ms <= at < to_ms])


async def _timed(session: ClientSession, method: str, url: str, key: str, body: Any = None) -> tuple[int, float]:
    """(status, latency ms); status 0 when no answer came within the session's timeout."""
    started = time.perf_counter()
    try:
        async with session.request(method, url, json=body, headers={"Authorization": f"Bearer {key}"}) as response:
            await response.read()
            return response.status, (time.perf_counter() - started) * 1000
    except (TimeoutError, ClientError):
        return 0, (time.perf_counter() - started) * 1000


async def bench(base_url: str, admin_key: str, apps: int, timers: int, settle_s: float) -> dict[str, Any]:
    receiver = Receiver()
    await receiver.start()
    hook = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        async with ClientSession(timeout=ClientTimeout(total=60)) as session:
            timer_key, _ = await create_bench_app(session, base_url, admin_key, name="timers")
            start_ms = now_ms() + 2000
            body = {
                "tasks": [
                    {
                        "name": f"tick-{i}",
                        "callback": {"url": hook},
                        "schedule": {"kind": "interval", "every_ms": EVERY_MS, "start_at_ms": start_ms},
                    }
                    for i in range(timers)
                ]
            }
            status, _ = await _timed(session, "POST", f"{base_url}/v1/tasks/batch", timer_key, body)
            assert status == 200, status
            await asyncio.sleep(2 + settle_s)
            quiet_from = now_ms()
            await asyncio.sleep(settle_s)
            keys = [(await create_bench_app(session, base_url, admin_key, name=f"new-{i}"))[0] for i in range(apps)]
            window_from = now_ms()
            creates = await asyncio.gather(
                *(
                    _timed(
                        session,
                        "POST",
                        f"{base_url}/v1/tasks",
                        key,
                        {
                            "name": "first",
                            "schedule": {"kind": "delay", "delay_ms": 3_600_000},
                            "callback": {"url": hook},
                        },
                    )
                    for key in keys
                )
            )
            stats = await asyncio.gather(*(_timed(session, "GET", f"{base_url}/v1/stats", key) for key in keys))
            await asyncio.sleep(settle_s)
            window_to = now_ms() - 1000  # fires due in the last second may still be on their way
            await asyncio.sleep(1.5)
        return {
            "apps": apps,
            "timers": timers,
            "create_statuses": sorted({s for s, _ in creates}),
            "first_create": asdict(Latencies.of([ms for _, ms in creates])),
            "stats_statuses": sorted({s for s, _ in stats}),
            "stats": asdict(Latencies.of([ms for _, ms in stats])),
            "fire_lateness_quiet": asdict(receiver.lateness(quiet_from, window_from)),
            "fire_lateness_during": asdict(receiver.lateness(window_from, window_to)),
        }
    finally:
        await receiver.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", help="a MariaDB URL (default: embedded SQLite)")
    parser.add_argument("--topology", default="8x4x16")
    parser.add_argument("--apps", type=int, default=30)
    parser.add_argument("--timers", type=int, default=100, help="tasks firing every second")
    parser.add_argument("--settle-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    prefix = f"tjfc_{secrets.token_hex(3)}"
    settings: dict[str, Any] = {"storage": {"database_prefix": prefix}} if args.storage else {}
    try:
        with node_process(
            storage_urls=[args.storage] if args.storage else None, topology=args.topology, settings=settings
        ) as node:
            result = asyncio.run(bench(node.base_url, node.admin_key, args.apps, args.timers, args.settle_s))
    finally:
        if args.storage:
            from testkit.databases import drop_databases
            from tjobs.settings import StorageSettings

            drop_databases(StorageSettings(urls=[args.storage], database_prefix=prefix, topology=args.topology))
    print(
        json.dumps({"topology": args.topology, "storage": "mariadb" if args.storage else "sqlite", **result}, indent=2)
    )


if __name__ == "__main__":
    main()
