"""The gRPC transport: one attempt = one ``Receiver.Fire`` call (``proto/tjobs/callback/v1/receiver.proto``).

:class:`GrpcTransport` keeps the :class:`tjobs.delivery.transport.Transport` contract for targets of
protocol ``grpc`` (:class:`tjobs.targets.model.GrpcTarget`). The :class:`FireRequest` carries the
attempt as HTTP would send it: ``payload`` is the body, ``headers`` the signed headers (names
lower-cased, the Standard Webhooks signature included), and the flow id, task id, task name,
scheduled instant and attempt as fields (the task name is read from the JSON envelope, the default
body; empty when the task sends its own body). The target's credential ``authorization`` is sent as
call metadata ``authorization``; nothing else is.

The answer is the call's status; ``AttemptResult.status`` is its number (``0`` OK … ``16``
UNAUTHENTICATED) and ``error`` reads ``gRPC <CODE>: <details>``:

==============================================================  ================================
status                                                          outcome
==============================================================  ================================
``OK``                                                          delivered
``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``RESOURCE_EXHAUSTED``  retryable (trailing metadata
                                                                ``retry-after-ms`` → ``retry_after_ms``,
                                                                capped by ``max_retry_after_s``)
``CANCELLED``                                                   retryable (see below)
any other                                                       permanent
==============================================================  ================================

UNAVAILABLE is also what the client itself reports when it cannot connect (refused, reset, the
receiver gone mid-call). ``CANCELLED`` is retryable although the issue lists it with the permanent
codes: the client never cancels a call it wants an answer to (a cancelled :meth:`send` raises
``CancelledError`` instead), so a CANCELLED status comes from a receiver or proxy dropping the call
while shutting down or a channel closed under it, which says nothing about the request; classifying it
permanent would dead-letter a fire the receiver never handled. An unhandled exception in the
receiver's handler is ``UNKNOWN``: permanent, as the issue asks (a consumer that wants a retry answers
``UNAVAILABLE``).

The deadline of a call is the target's ``deadline_ms``, else the request's ``timeout_ms``: the call,
connecting included, ends within it (``DEADLINE_EXCEEDED``: retryable).

Channels are pooled per ``(address, tls)``, created by the first send to them and shared by every
target and app with that address (credentials travel per call, as metadata); :meth:`close` closes
them all and the next send opens new ones. One channel multiplexes every concurrent call on one
HTTP/2 connection; a broken connection is re-established by the channel itself, at most
:data:`MAX_RECONNECT_BACKOFF_MS` after the receiver is back (until then calls fail fast with
UNAVAILABLE: no call waits for a connection, ``wait_for_ready`` is off).

Where it connects (the SSRF guarantee): only to ``address`` as given. Which addresses are allowed is
the operator's decision, checked before the transport is asked (the node's allowed broker/gRPC
addresses). The address is ``host:port`` and is parsed here by :func:`tjobs.targets.urls.parse_host`
(the one host validator): an IP literal becomes an ``ipv4:``/``ipv6:`` channel target, which gRPC
connects to without any lookup; a name becomes ``dns:///name:port``, resolved by gRPC to that name's
own A/AAAA records. gRPC's ways of going elsewhere are off: no HTTP CONNECT proxy from the
environment (``grpc.enable_http_proxy`` 0), no service config from DNS TXT records (which could
name a load balancer; ``grpc.service_config_disable_resolution`` 1), no SRV/grpclb lookups (off by
default), no retries of its own (``grpc.enable_retries`` 0); gRPC has no redirects. No other
scheme (``unix:``, ``xds:``…) can be named: the target string is built here, never taken from the
address. With ``tls`` the certificate is verified against the name (or the address), with the
system roots unless the transport was given ``root_certificates``.

Bounded: a reply larger than :data:`tjobs.delivery.transport.MAX_BODY_BYTES` is refused by the client
(``RESOURCE_EXHAUSTED``). Credentials stay secret: a receiver's details that echo the authorization
value (or a long part of it) have it replaced by ``***``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re

import grpc
import orjson
from grpc import aio

from tjobs.clock import Clock, SystemClock
from tjobs.delivery.grpc_proto import receiver_pb2, receiver_pb2_grpc
from tjobs.delivery.transport import (
    MAX_BODY_BYTES,
    MAX_ERROR_CHARS,
    AttemptResult,
    CallbackRequest,
    Outcome,
    TargetRejected,
    Transport,
    failure_error,
    log_unexpected_error,
)
from tjobs.settings import CallbackSettings
from tjobs.targets.model import REDACTED, GrpcTarget
from tjobs.targets.urls import UrlRefused, parse_host

logger = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
RETRY_AFTER_KEY = "retry-after-ms"
OK_STATUS = grpc.StatusCode.OK.value[0]
MIN_RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 2000  # gRPC's default climbs to 120 s: a receiver back up would wait that long
MIN_SECRET_PART_CHARS = 8  # parts of the authorization value this long are scrubbed on their own too
_PORT = re.compile(r"^[0-9]{1,5}$")
_METADATA_VALUE = re.compile(r"^[\x20-\x7e]*$")
_ENVELOPE_START = b'{"flow_id":'

ChannelKey = tuple[str, bool]


def channel_target(address: str) -> str:
    """The gRPC channel target of ``host:port``: ``ipv4:a.b.c.d:port``, ``ipv6:[…]:port`` or
    ``dns:///name:port``; raises :class:`UrlRefused` for anything else."""
    host_text, colon, port_text = address.rpartition(":")
    if not colon or not _PORT.match(port_text) or not 1 <= int(port_text) <= 65535:
        raise UrlRefused("address: must be host:port with a port in 1..65535")
    host = parse_host(host_text)
    port = int(port_text)
    if isinstance(host.address, ipaddress.IPv4Address):
        return f"ipv4:{host.name}:{port}"
    if isinstance(host.address, ipaddress.IPv6Address):
        return f"ipv6:[{host.name}]:{port}"
    return f"dns:///{host.bare_name}:{port}"


class GrpcTransport(Transport):
    """Sends callback attempts as ``Receiver.Fire`` calls over pooled gRPC channels (see the module
    docstring)."""

    def __init__(
        self,
        settings: CallbackSettings,
        clock: Clock | None = None,
        root_certificates: bytes | None = None,
    ) -> None:
        self._clock = clock or SystemClock()
        self._max_retry_after_ms = settings.max_retry_after_s * 1000
        self._root_certificates = root_certificates
        self._options: tuple[tuple[str, str | int], ...] = (
            ("grpc.enable_http_proxy", 0),
            ("grpc.service_config_disable_resolution", 1),
            ("grpc.enable_retries", 0),
            ("grpc.max_receive_message_length", MAX_BODY_BYTES),
            ("grpc.primary_user_agent", settings.user_agent),
            ("grpc.initial_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
            ("grpc.min_reconnect_backoff_ms", MIN_RECONNECT_BACKOFF_MS),
            ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
        )
        self._channels: dict[ChannelKey, tuple[aio.Channel, receiver_pb2_grpc.ReceiverAsyncStub]] = {}

    @property
    def open_channels(self) -> int:
        """How many channels the pool holds now."""
        return len(self._channels)

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()

    async def send(self, request: CallbackRequest) -> AttemptResult:
        started_ms = self._clock.now_ms()
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome = Outcome.RETRYABLE
        status: int | None = None
        error: str | None = None
        retry_after_ms: int | None = None
        secret: str | None = None
        try:
            target = request.target
            settings = target.settings if target is not None else None
            if target is None or not isinstance(settings, GrpcTarget):
                raise TargetRejected(request.url, "not a gRPC target")
            secret = target.credentials.get("authorization")
            metadata: tuple[tuple[str, str], ...] = ()
            if secret is not None:
                if not _METADATA_VALUE.match(secret):
                    raise TargetRejected(request.url, "credentials.authorization must be printable ASCII")
                metadata = (("authorization", secret),)
            stub = self._stub(request.url, settings)
            deadline_ms = settings.deadline_ms or request.timeout_ms
            await stub.Fire(fire_request(request), timeout=deadline_ms / 1000, metadata=metadata)
            outcome, status = Outcome.DELIVERED, OK_STATUS
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            # not this task: grpc.aio raises CancelledError for a call its channel cancelled (close())
            error = "gRPC call cancelled: the channel was closed"
        except aio.AioRpcError as failed:
            code = failed.code()
            status = code.value[0]
            details = " ".join((failed.details() or "").split())
            error = _scrubbed(f"gRPC {code.name}: {details}" if details else f"gRPC {code.name}", secret)
            if code in RETRYABLE_CODES:
                retry_after_ms = self._retry_after_ms(failed.trailing_metadata())
            else:
                outcome = Outcome.PERMANENT
        except TargetRejected as rejected:
            outcome, error = Outcome.PERMANENT, str(rejected)[:MAX_ERROR_CHARS]
        except Exception as exc:
            error = _scrubbed(failure_error(exc, request.timeout_ms), secret)
            log_unexpected_error(logger, request, error)
        return request.result(outcome, status, error, retry_after_ms, started_ms, loop.time() - started)

    def _stub(self, url: str, settings: GrpcTarget) -> receiver_pb2_grpc.ReceiverAsyncStub:
        key = (settings.address, settings.tls)
        pooled = self._channels.get(key)
        if pooled is not None:
            return pooled[1]
        try:
            target = channel_target(settings.address)
        except UrlRefused as refused:
            raise TargetRejected(url, refused.reason) from None
        if settings.tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
            channel = aio.secure_channel(target, credentials, options=self._options)
        else:
            channel = aio.insecure_channel(target, options=self._options)
        stub = receiver_pb2_grpc.ReceiverStub(channel)
        self._channels[key] = (channel, stub)
        return stub

    def _retry_after_ms(self, trailing: aio.Metadata | None) -> int | None:
        if trailing is None:
            return None
        value = trailing.get(RETRY_AFTER_KEY)
        if not isinstance(value, str) or not value.isascii() or not value.isdigit():
            return None
        return min(int(value), self._max_retry_after_ms)


def fire_request(request: CallbackRequest) -> receiver_pb2.FireRequest:
    """The ``FireRequest`` of one attempt: the body as ``payload``, the headers lower-cased."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    scheduled = headers.get("tjobs-scheduled-at", "")
    body = request.body or b""
    return receiver_pb2.FireRequest(
        flow_id=request.flow_id,
        task_id=headers.get("tjobs-task-id", ""),
        task_name=_task_name(body, request.flow_id),
        scheduled_at_ms=int(scheduled) if scheduled.isascii() and scheduled.isdigit() else 0,
        attempt=request.attempt,
        payload=body,
        headers=headers,
    )


def _task_name(body: bytes, flow_id: str) -> str:
    """The task name of tjobs' JSON envelope (the default body); empty for a task's own body."""
    if not body.startswith(_ENVELOPE_START):
        return ""
    try:
        envelope = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(envelope, dict) or envelope.get("flow_id") != flow_id:
        return ""
    name = envelope.get("task_name")
    return name if isinstance(name, str) else ""


def _scrubbed(text: str, secret: str | None) -> str:
    """``text`` (cut to the error's length) with the authorization value and its long parts replaced."""
    if secret:
        for part in (secret, *(p for p in secret.split() if len(p) >= MIN_SECRET_PART_CHARS)):
            text = text.replace(part, REDACTED)
    return text[:MAX_ERROR_CHARS]
