"""``OutcomeWriter.unwritten`` and ``when_written``, which a retry waits on (docs/design.md invariant 4: a retry
goes only once the outcome of the attempt before it is written). A flush writes its updates in chunks of
``flush_batch``; a flow whose chunk is written is written, while the chunks after it still are being written."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tests.delivery_fakes import CLOCK
from tjobs.delivery.outcomes import OutcomeWriter
from tjobs.model import FlowStatus, FlowUpdate


class SecondWriteHeld:
    """A store whose second write waits until ``go`` is set (a slow statement)."""

    def __init__(self) -> None:
        self.writes: list[list[FlowUpdate]] = []
        self.holding = asyncio.Event()
        self.go = asyncio.Event()

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        self.writes.append(list(updates))
        if len(self.writes) == 2:
            self.holding.set()
            await self.go.wait()


def pending(task_id: int) -> FlowUpdate:
    return FlowUpdate(task_id, 1000, FlowStatus.PENDING, 1, 2000, 500, "HTTP 500")


async def test_a_flow_whose_chunk_is_written_is_not_unwritten_while_the_next_chunk_is_written() -> None:
    # Given two flows' outcomes flushed in chunks of one, the second chunk's write slow
    store = SecondWriteHeld()
    writer = OutcomeWriter(store, CLOCK, flush_interval_s=3600, flush_batch=1)
    writer.put("1-1000", pending(1))
    writer.put("2-1000", pending(2))
    writer.start()
    try:
        await asyncio.wait_for(store.holding.wait(), 5.0)
        # Then the first flow's outcome is written: a retry of it waits for nothing
        assert not writer.unwritten("1-1000")
        assert writer.unwritten("2-1000")
        # and one that asks to be told once it is written (a retry due just now) is told when the second is
        told: list[str] = []
        writer.when_written("2-1000", lambda: told.append("2-1000"))
        store.go.set()
        for _ in range(100):
            if told:
                break
            await asyncio.sleep(0)
        assert told == ["2-1000"]
        assert [[u.task_id for u in chunk] for chunk in store.writes] == [[1], [2]]
    finally:
        await writer.stop(asyncio.get_running_loop().time() + 1.0)
