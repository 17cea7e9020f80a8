"""A broker attempt cancelled as its publish is answered raises its cancellation, whatever the client
library's ``asyncio.wait_for`` did with it (CPython gh-86296; :mod:`tjobs.cancellation`).

Every broker transport's ``_publish`` awaits a client library, and nats-py (connecting), redis-py
(writing with a socket timeout) and aiormq (with a timeout) wait inside ``asyncio.wait_for``. Here a
transport whose publish is one such ``wait_for`` is cancelled in the loop turn its answer comes: the
attempt must end cancelled, not with a result (the deliverer cancels attempts it gave up, and a
stopping node those it no longer waits for); and an attempt whose own deadline expires as the
answer comes is a timeout, as the deadline says.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

import pytest

from tests.contract.test_broker_transport_contract import signed_request
from tjobs.delivery.broker import BrokerTransport
from tjobs.delivery.nats_transport import NatsTransport, _Server
from tjobs.delivery.transport import CallbackRequest, Outcome
from tjobs.settings import CallbackSettings
from tjobs.targets.model import NatsTarget, Protocol, Target

TARGET = Target("app", "destination", NatsTarget(("nats://127.0.0.1:4222",), "orders"), credentials={})


class WaitForTransport(BrokerTransport[NatsTarget]):
    """A broker transport whose publish waits for its answer as the client libraries do: in ``wait_for``."""

    protocols = frozenset({Protocol.NATS})

    def __init__(self) -> None:
        super().__init__(CallbackSettings())
        self.answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting = asyncio.Event()

    @property
    def pending_publishes(self) -> int:
        return 0 if self.answer.done() else int(self.waiting.is_set())

    async def close(self) -> None:
        return None

    async def _publish(self, request: CallbackRequest, target: Target, settings: NatsTarget) -> None:
        self.waiting.set()
        await asyncio.wait_for(self.answer, 60)


async def test_an_attempt_cancelled_as_its_answer_comes_is_cancelled_not_a_result() -> None:
    transport = WaitForTransport()
    attempt = asyncio.create_task(transport.send(signed_request(TARGET)))
    await transport.waiting.wait()
    transport.answer.set_result(None)  # the broker's answer, in the same loop turn as the cancellation
    attempt.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await attempt
    assert attempt.cancelled(), f"the attempt came back {attempt.result()}"


async def test_an_attempt_whose_deadline_expires_as_its_answer_comes_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport = WaitForTransport()
    loop = asyncio.get_running_loop()
    now = [loop.time()]
    monkeypatch.setattr(loop, "time", lambda: now[0])  # the loop's clock stands still until moved below
    attempt = asyncio.create_task(transport.send(signed_request(TARGET, timeout_ms=50)))
    await transport.waiting.wait()
    loop.call_at(now[0] + 0.05, transport.answer.set_result, None)  # the answer, at the deadline's instant
    now[0] += 1.0  # both due in the same loop turn
    result = await attempt
    assert result.outcome is Outcome.RETRYABLE, result
    assert result.error is not None and "timeout" in result.error.lower(), result.error


async def test_a_nats_attempt_cancelled_as_its_connection_opens_publishes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nats-py opens a connection within wait_for: a cancellation lost there must not go on to publish,
    # whose ack nothing but the (spent) deadline bounds
    transport = NatsTransport(CallbackSettings())
    opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    connecting = asyncio.Event()
    published: list[bytes] = []

    async def connect(server: _Server) -> object:
        connecting.set()
        await asyncio.wait_for(opened, 60)  # as nats-py's connect does
        return SimpleNamespace(is_connected=True)

    async def publish(server: _Server, client: object, command: object, payload: bytes) -> bytes:
        published.append(payload)
        return b"{}"

    monkeypatch.setattr(_Server, "_connect", connect)
    monkeypatch.setattr(_Server, "publish", publish)
    attempt = asyncio.create_task(transport.send(signed_request(TARGET)))
    await connecting.wait()
    opened.set_result(None)  # the connection opens in the loop turn the attempt is cancelled
    attempt.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await attempt
    assert attempt.cancelled()
    assert published == []
