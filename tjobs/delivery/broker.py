"""What the message-broker transports share: one bounded attempt, classified, with credentials kept out.

:class:`BrokerTransport` keeps the :class:`tjobs.delivery.transport.Transport` contract for the
transports that publish to a broker (:mod:`tjobs.delivery.amqp_transport`,
:mod:`tjobs.delivery.nats_transport`, :mod:`tjobs.delivery.redis_stream_transport`, and their twin
:mod:`tjobs.delivery.broker_twin`). A subclass only publishes (:meth:`BrokerTransport._publish`) and
says what its broker's failures mean by raising:

* :class:`BrokerRefused` — the broker understood and will never take this publish as configured
  (wrong credentials, a target naming something that does not exist): :attr:`Outcome.PERMANENT`;
* :class:`BrokerBusy` — the broker is there but cannot take it now (a nack, a full queue, nobody
  bound or listening): :attr:`Outcome.RETRYABLE`;
* anything else (a refused or reset connection, a broker that went away, a timeout, a bug):
  :attr:`Outcome.RETRYABLE`, as for HTTP.

Here, for every attempt: the request must name a target of the transport's protocol (else
permanent); the target policy is asked first, if any (a reason: permanent, vetoed; ``OSError`` or
``TimeoutError``: retryable), and only its verdict is used, since a broker address is not an HTTP
route; the whole attempt (connecting, publishing, the broker's acknowledgement) runs within
``timeout_ms``; an attempt cancelled (or past ``timeout_ms``) while its publish was answered is
cancelled (or timed out), not a result, even where the client library's ``asyncio.wait_for``
swallowed the cancellation (:func:`tjobs.cancellation.cancellable`); and ``error`` is short and
scrubbed of the target's credential values and of any user info in a URL (:func:`scrub`). ``status``
is always ``None``: a broker's answer is no HTTP status.
"""

from __future__ import annotations

import asyncio
import re
from abc import abstractmethod
from collections.abc import Callable, Hashable, Mapping
from typing import ClassVar, Generic, TypeVar, cast
from typing import Protocol as Interface

from tjobs.cancellation import cancellable
from tjobs.clock import Clock, SystemClock
from tjobs.delivery.transport import (
    MAX_ERROR_CHARS,
    AttemptResult,
    CallbackRequest,
    Outcome,
    TargetPolicy,
    TargetRejected,
    Transport,
    failure_error,
)
from tjobs.settings import CallbackSettings
from tjobs.targets.model import REDACTED, AmqpTarget, NatsTarget, Protocol, RedisStreamTarget, Target

SettingsT = TypeVar("SettingsT", bound=AmqpTarget | NatsTarget | RedisStreamTarget)
KeyT = TypeVar("KeyT", bound=Hashable)

_USER_INFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


class BrokerRefused(Exception):
    """The broker refused the publish for good (credentials, a target that does not exist): permanent."""


class BrokerBusy(Exception):
    """The broker cannot take the publish now (nack, full, nothing bound or listening): retryable."""


class NotThisProtocol(Exception):
    """The request names no target of this transport's protocol: permanent (a routing bug upstream)."""


def scrub(text: str, credentials: Mapping[str, str]) -> str:
    """``text`` without URL user info and without ``credentials``, cut to ``MAX_ERROR_CHARS``.

    Secrets (passwords, tokens: every key but ``username``) are replaced wherever they occur; the
    user name where it stands as a word of its own (a short one would otherwise blank out parts of
    words)."""
    text = _USER_INFO.sub(rf"\g<scheme>{REDACTED}@", text)
    for key, value in sorted(credentials.items(), key=lambda item: len(item[1]), reverse=True):
        if not value:
            continue
        if key == "username":
            text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])", REDACTED, text)
        else:
            text = text.replace(value, REDACTED)
    return text[:MAX_ERROR_CHARS]


class BrokerTransport(Transport, Generic[SettingsT]):
    """One publish per :meth:`send`, bounded and classified (see the module docstring)."""

    protocols: ClassVar[frozenset[Protocol]]  # the targets it publishes to

    def __init__(
        self, settings: CallbackSettings, clock: Clock | None = None, policy: TargetPolicy | None = None
    ) -> None:
        self._settings = settings
        self._clock = clock or SystemClock()
        self._policy = policy

    @property
    @abstractmethod
    def pending_publishes(self) -> int:
        """Publishes written to a broker and not answered yet (0 once every send has returned)."""

    @abstractmethod
    async def _publish(self, request: CallbackRequest, target: Target, settings: SettingsT) -> None:
        """Publish ``request`` and return once the broker took it; raise what it means otherwise."""

    async def send(self, request: CallbackRequest) -> AttemptResult:
        started_ms = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome = Outcome.DELIVERED
        error: str | None = None
        credentials: Mapping[str, str] = {}
        try:
            target = request.target
            if target is None or target.protocol not in self.protocols:
                names = "/".join(sorted(protocol.value for protocol in self.protocols))
                raise NotThisProtocol(f"not a {names} target")
            credentials = target.credentials
            await self._check_policy(request)
            async with asyncio.timeout(request.timeout_ms / 1000):
                await cancellable(self._publish(request, target, cast(SettingsT, target.settings)))
        except asyncio.CancelledError:
            raise
        except (BrokerRefused, NotThisProtocol, TargetRejected) as exc:
            outcome, error = Outcome.PERMANENT, scrub(failure_message(exc, request.timeout_ms), credentials)
        except Exception as exc:
            outcome, error = Outcome.RETRYABLE, scrub(failure_message(exc, request.timeout_ms), credentials)
        return request.result(outcome, None, error, None, started_ms, loop.time() - started)

    async def _check_policy(self, request: CallbackRequest) -> None:
        if self._policy is None:
            return
        verdict = await self._policy(request)
        if isinstance(verdict, str):
            raise TargetRejected(request.url, verdict)


class BrokerConnection(Interface):
    """What a :class:`ConnectedBrokerTransport` keeps per broker and user: a connection, or a pool of them."""

    @property
    def pending(self) -> int:
        """Its publishes written and not answered yet."""
        ...

    async def close(self) -> None:
        """Release it; never raises for a broker already gone."""
        ...


ConnectionT = TypeVar("ConnectionT", bound=BrokerConnection)


class ConnectedBrokerTransport(BrokerTransport[SettingsT], Generic[SettingsT, KeyT, ConnectionT]):
    """A broker transport with one :class:`BrokerConnection` per key (the broker's address and the
    target's credentials), opened by the first send that needs it and kept until :meth:`close`."""

    def __init__(
        self, settings: CallbackSettings, clock: Clock | None = None, policy: TargetPolicy | None = None
    ) -> None:
        super().__init__(settings, clock, policy)
        self._connections: dict[KeyT, ConnectionT] = {}

    @property
    def pending_publishes(self) -> int:
        return sum(connection.pending for connection in self._connections.values())

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        await asyncio.gather(*(connection.close() for connection in connections.values()))

    def _connection(self, key: KeyT, opening: Callable[[], ConnectionT]) -> ConnectionT:
        """The connection of ``key``, ``opening()`` it first if there is none yet."""
        connection = self._connections.get(key)
        if connection is None:
            connection = self._connections[key] = opening()
        return connection


def failure_message(exc: BaseException, timeout_ms: int) -> str:
    """The ``error`` of a failed publish: a classified failure's own words, else as for HTTP."""
    if isinstance(exc, BrokerRefused | BrokerBusy | NotThisProtocol) and str(exc):
        return str(exc)
    return failure_error(exc, timeout_ms)
