"""What the NATS JetStream transport promises beyond the broker-transport contract, on a real NATS server.

The contract suite (``tests/contract/test_broker_transport_contract.py``) covers what every broker
transport shares; these are the JetStream cases of :mod:`tjobs.delivery.nats_transport`'s docstring:
a retry of the same flow id is stored once and still reported delivered (the duplicate ack), a target
whose ``stream`` is not the one capturing its subject is permanent, a header value cannot break into
the header block, and a publish given up (cancelled) leaves nothing waiting for its ack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.contract.broker_backends import NatsBackend, give_up_once_written
from tests.contract.test_broker_transport_contract import signed_request
from tjobs.delivery.transport import Outcome
from tjobs.targets.model import NatsTarget

pytestmark = pytest.mark.nats


@pytest.fixture
async def backend(nats_url: str) -> AsyncIterator[NatsBackend]:
    built = NatsBackend(nats_url)
    try:
        yield built
    finally:
        await built.aclose()


async def test_a_retry_of_the_same_flow_is_delivered_and_stored_once(backend: NatsBackend) -> None:
    target = await backend.destination()
    request = signed_request(target)
    first = await backend.transport.send(request)
    retry = await backend.transport.send(replace(request, attempt=4))
    assert (first.outcome, retry.outcome) == (Outcome.DELIVERED, Outcome.DELIVERED)
    [message] = await backend.received(target, 1, drain=True)
    assert message.message_id == request.flow_id


async def test_a_target_naming_another_stream_than_the_subjects_is_permanent(backend: NatsBackend) -> None:
    target = await backend.destination()
    other = await backend.destination()
    assert isinstance(target.settings, NatsTarget) and isinstance(other.settings, NatsTarget)
    wrong = replace(target, settings=replace(target.settings, stream=other.settings.stream))
    result = await backend.transport.send(signed_request(wrong))
    assert (result.outcome, result.status) == (Outcome.PERMANENT, None)
    assert result.error == f"subject {target.settings.subject!r} is not stored by stream {other.settings.stream!r}"
    assert await backend.received(target, 0, drain=True) == []


async def test_a_header_value_with_a_line_break_cannot_add_a_header(backend: NatsBackend) -> None:
    target = await backend.destination()
    request = signed_request(target)
    forged = replace(request, headers={**request.headers, "x-note": " a\r\nInjected: yes\n"})
    assert (await backend.transport.send(forged)).outcome is Outcome.DELIVERED
    [message] = await backend.received(target, 1, drain=True)
    assert message.headers["x-note"] == "a  Injected: yes"
    assert "Injected" not in message.headers


async def test_a_cancelled_publish_leaves_nothing_waiting_for_its_ack(backend: NatsBackend) -> None:
    target = await backend.destination()
    assert (await backend.transport.send(signed_request(target))).outcome is Outcome.DELIVERED  # connected
    attempt = await give_up_once_written(backend, signed_request(target))  # written, its ack not read yet
    assert attempt.cancelled()  # the cancellation propagates, not turned into a result
    assert backend.transport.pending_publishes == 0
    await backend.received(target, 0, drain=True)  # sent or not, the destination is emptied
