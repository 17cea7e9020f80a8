"""The protocol router: one :class:`~tjobs.delivery.transport.Transport` in front of every protocol.

The deliverer codes against one transport; this one picks, per request:

- an inline URL (``request.target is None``) → the node's HTTP transport, as it is;
- an HTTP target → the same HTTP transport, as plain URL requests: one per URL of the target (with
  the target's method, its headers and its credentials as headers, the request's timeout), each
  judged by the callback URL policy with the app's allow-list like an inline URL. A target with
  several URLs is delivered when every URL answered ``2xx``; otherwise the attempt's outcome is the
  worst of them (permanent over retryable) and every URL is sent again on the retry (receivers
  deduplicate on ``webhook-id``; a task that must track URLs separately names one target per URL);
- any other protocol → that protocol's transport (``tjobs.delivery.<protocol>_transport``), imported
  and constructed (``XTransport(settings)``) on its first use, so a node that never sends over AMQP
  never imports its client library. Before it is handed over, the target's addresses must be on the
  operator's allow-list (``targets.allowed_addresses``, :mod:`tjobs.targets.addresses`); otherwise
  the attempt is a permanent refusal and nothing connects. A protocol whose transport cannot be
  loaded on this node (its client library missing) is a permanent failure saying so.

Transports may be given up front (``transports``: the in-memory twin per protocol in tests). The
result always names the destination as the deliverer tracks it (``target:<name>``), and its error
never carries a credential.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Mapping
from dataclasses import replace

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.transport import AttemptResult, CallbackRequest, Outcome, Transport
from tjobs.settings import CallbackSettings
from tjobs.targets.addresses import NO_ADDRESSES, AddressAllowList
from tjobs.targets.model import HttpTarget, Protocol, Target

logger = logging.getLogger(__name__)

TRANSPORT_CLASSES: dict[Protocol, tuple[str, str]] = {
    Protocol.GRPC: ("tjobs.delivery.grpc_transport", "GrpcTransport"),
    Protocol.AMQP: ("tjobs.delivery.amqp_transport", "AmqpTransport"),
    Protocol.NATS: ("tjobs.delivery.nats_transport", "NatsTransport"),
    Protocol.REDIS_STREAM: ("tjobs.delivery.redis_stream_transport", "RedisStreamTransport"),
}
_SEVERITY = {Outcome.DELIVERED: 0, Outcome.RETRYABLE: 1, Outcome.PERMANENT: 2}


class ProtocolRouter(Transport):
    """Routes each request to the transport of its protocol (see the module docstring)."""

    def __init__(
        self,
        http: Transport,
        settings: CallbackSettings,
        *,
        allowed_addresses: AddressAllowList = NO_ADDRESSES,
        transports: Mapping[Protocol, Transport] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.http = http
        self._clock = clock or SystemClock()
        self._settings = settings
        self._allowed = allowed_addresses
        self._transports: dict[Protocol, Transport] = dict(transports or {})
        self._unavailable: dict[Protocol, str] = {}

    async def send(self, request: CallbackRequest) -> AttemptResult:
        target = request.target
        if target is None:
            return await self.http.send(request)
        settings = target.settings
        if isinstance(settings, HttpTarget):
            return await self._send_http_target(request, target, settings)
        refusal = self._allowed.refusal(settings)
        if refusal is not None:
            return self._refused(request, f"target {target.name!r} refused: {refusal[1]}")
        transport = self._transports.get(target.protocol) or self._load(target.protocol)
        if transport is None:
            return self._refused(request, self._unavailable[target.protocol])
        try:
            return await transport.send(request)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a transport bug: retry (bounded by max_attempts), say nothing secret
            logger.error(
                "the %s transport raised %s for flow %s",
                target.protocol.value,
                type(error).__name__,
                request.flow_id,
                extra={"action": "transport_failed", "flow_id": request.flow_id},
            )
            return self._result(request, Outcome.RETRYABLE, f"{target.protocol.value} transport error")

    def _load(self, protocol: Protocol) -> Transport | None:
        """The protocol's transport, imported and built on first use; ``None`` if it cannot be here."""
        if protocol in self._unavailable:
            return None
        module_name, class_name = TRANSPORT_CLASSES[protocol]
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            transport: Transport = cls(self._settings)
        except Exception as error:
            reason = f"the {protocol.value} transport is not available on this node ({type(error).__name__}: {error})"
            logger.error(reason, extra={"action": "transport_unavailable"})
            self._unavailable[protocol] = reason[:240]
            return None
        self._transports[protocol] = transport
        return transport

    async def _send_http_target(self, request: CallbackRequest, target: Target, settings: HttpTarget) -> AttemptResult:
        headers = {**request.headers, **settings.headers, **target.credentials}
        plain = [
            replace(request, url=url, method=settings.method, headers=headers, target=None) for url in settings.urls
        ]
        if len(plain) == 1:
            results = [await self.http.send(plain[0])]
        else:
            results = list(await asyncio.gather(*(self.http.send(one) for one in plain)))
        worst = max(results, key=lambda r: _SEVERITY[r.outcome])
        error = worst.error
        if len(results) > 1 and worst.outcome is not Outcome.DELIVERED:
            error = "; ".join(
                f"urls[{i}]: {r.error}" for i, r in enumerate(results) if r.outcome is not Outcome.DELIVERED
            )[:240]
        delays = [r.retry_after_ms for r in results if r.retry_after_ms is not None]
        started_ms = min(r.started_ms for r in results)
        duration_s = max(r.duration_s for r in results)
        return request.result(worst.outcome, worst.status, error, max(delays, default=None), started_ms, duration_s)

    async def close(self) -> None:
        await self.http.close()
        for transport in list(self._transports.values()):
            await transport.close()

    def _result(self, request: CallbackRequest, outcome: Outcome, error: str) -> AttemptResult:
        now_ms = self._clock.now_ms()
        return request.result(outcome, None, error, None, now_ms, 0.0)

    def _refused(self, request: CallbackRequest, reason: str) -> AttemptResult:
        """Nothing was connected: a permanent failure (the flow dead-letters with ``reason``)."""
        return self._result(request, Outcome.PERMANENT, reason)
