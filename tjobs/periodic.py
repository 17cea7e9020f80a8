"""A background pass repeated every ``interval_s`` that stops between passes, never inside one.

The compensator, retention, the service-level recorder and the disabled-apps refresh run on it; it
imports nothing of tjobs, so any layer may (docs/design.md, "Layering").

Cancelling a coroutine in the middle of a database call leaves the driver's work running (aiosqlite
finishes it on its own thread and then reports to a loop that may be gone), so :meth:`stop` asks the
loop to end, waits for the pass in progress up to ``timeout_s``, and only then cancels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod

logger = logging.getLogger(__name__)


class PeriodicPass(ABC):
    name = "periodic"

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._stopping = asyncio.Event()
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run_once(self) -> int:
        """One pass; returns how many items it handled."""

    async def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(self._loop(), name=f"tjobs-{self.name}")

    def wake(self) -> None:
        """Start the next pass now rather than at the end of the interval (one pass for any number of wakes
        before it starts; the interval then counts from that pass)."""
        self._woken.set()

    async def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        if self._task is None:
            return
        done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
        if not done:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._stopped_or_woken()
            if self._stopping.is_set():
                return
            self._woken.clear()
            try:
                await self.run_once()
            except Exception:
                logger.exception("%s pass failed", self.name, extra={"action": f"{self.name}_failed"})

    async def _stopped_or_woken(self) -> None:
        waits = {asyncio.ensure_future(self._stopping.wait()), asyncio.ensure_future(self._woken.wait())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
