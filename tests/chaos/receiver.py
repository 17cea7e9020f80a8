"""The fault suite's callback receiver: records every request as an accounting :class:`Callback` and, while
a :class:`ReceiverFaults` is set, answers a share of them with 5xx or lets them time out.

Runs in the test's event loop on 127.0.0.1 (a random port). A request is ``delivered`` when it was answered
2xx in time: a request picked to time out is held past the sender's timeout and recorded as not delivered.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from types import TracebackType

from aiohttp import web

from tests.chaos.accounting import Callback
from tests.receiver import _listening_socket


@dataclass(frozen=True)
class ReceiverFaults:
    error_share: float = 0.10  # answered 500
    timeout_share: float = 0.01  # held for hold_s (longer than the sender's timeout), then dropped
    hold_s: float = 5.0


class ChaosReceiver:
    def __init__(self, seed: int = 10) -> None:
        self.callbacks: list[Callback] = []
        self.faults: ReceiverFaults | None = None
        self._random = random.Random(seed)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> ChaosReceiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = _listening_socket()
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, backlog=1024).start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.Response:
        received_ms = time.time_ns() // 1_000_000
        await request.read()
        headers = request.headers
        status, hold_s = 200, 0.0
        if self.faults is not None:
            draw = self._random.random()
            if draw < self.faults.error_share:
                status = 500
            elif draw < self.faults.error_share + self.faults.timeout_share:
                hold_s = self.faults.hold_s
        try:
            self.callbacks.append(
                Callback(
                    task_id=int(headers.get("tjobs-task-id", "0")),
                    scheduled_at_ms=int(headers.get("tjobs-scheduled-at", "0")),
                    flow_id=headers.get("webhook-id", ""),
                    attempt=int(headers.get("tjobs-attempt", "0")),
                    sender=headers.get("User-Agent", ""),
                    received_ms=received_ms,
                    delivered=status == 200 and not hold_s,
                )
            )
        except ValueError:  # not a tjobs callback: record nothing, refuse it
            return web.Response(status=400)
        if hold_s:
            await asyncio.sleep(hold_s)  # the sender times out first
            return web.Response(status=504)
        return web.Response(status=status)
