"""Lease renewals over one long-lived etcd ``LeaseKeepAlive`` stream.

aetcd's ``refresh_lease`` opens a stream per call; renewing a thousand executor leases every few
seconds that way cost a node more than a millisecond of CPU per renewal and queued the renewals behind
the stream set-ups. Here every renewal is one message on one bidirectional stream, answered by etcd in
order, and renewals of a lease already waiting for its answer share that answer. A stream that fails
fails the renewals waiting on it (the caller answers 503) and the next renewal opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import aetcd
from aetcd import rpc

logger = logging.getLogger(__name__)


class LeaseKeepAlives:
    def __init__(self, client: Callable[[], aetcd.Client]) -> None:
        self._client = client
        self._requests: asyncio.Queue[int | None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, list[asyncio.Future[int]]] = {}
        self.sent = 0  # renewal requests put on the stream

    async def renew(self, lease_id: int) -> int:
        """Renew ``lease_id``; its TTL in seconds now (``0``: the lease has ended or never was)."""
        requests = await self._stream()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.get(lease_id)
        if waiting:
            waiting.append(future)  # a request for it is on the wire: its answer renews for both
        else:
            self._waiting[lease_id] = [future]
            requests.put_nowait(lease_id)
            self.sent += 1
        try:
            return await future
        finally:
            waiters = self._waiting.get(lease_id)
            if waiters is not None and future in waiters and not future.done():
                waiters.remove(future)  # gave up (timeout, cancelled): do not leave it to share answers
                if not waiters:
                    del self._waiting[lease_id]

    async def close(self) -> None:
        if self._requests is not None:
            self._requests.put_nowait(None)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._reader = None
        self._requests = None

    async def _stream(self) -> asyncio.Queue[int | None]:
        if self._requests is not None and self._reader is not None and not self._reader.done():
            return self._requests
        client = self._client()
        await client.connect()
        requests: asyncio.Queue[int | None] = asyncio.Queue()
        self._requests = requests
        self._reader = asyncio.create_task(self._read(client, requests), name="tjobs-etcd-lease-keepalives")
        return requests

    async def _read(self, client: aetcd.Client, requests: asyncio.Queue[int | None]) -> None:
        async def outgoing() -> AsyncIterator[rpc.LeaseKeepAliveRequest]:
            while True:
                lease_id = await requests.get()
                if lease_id is None:
                    return
                yield rpc.LeaseKeepAliveRequest(ID=lease_id)

        failure: BaseException = ConnectionError("the lease keepalive stream ended")
        try:
            call = client.leasestub.LeaseKeepAlive(outgoing(), metadata=client.metadata)
            async for reply in call:
                for future in self._waiting.pop(int(reply.ID), []):
                    if not future.done():
                        future.set_result(int(reply.TTL))
        except asyncio.CancelledError:
            failure = ConnectionError("the lease keepalive stream was closed")
            raise
        except Exception as error:
            logger.warning("lease keepalive stream failed (%s)", error, extra={"action": "keepalive_stream_failed"})
            failure = error
        finally:
            if self._requests is requests:
                self._requests = None
            waiting, self._waiting = self._waiting, {}
            for futures in waiting.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(failure)
