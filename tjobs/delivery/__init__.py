"""Delivery of committed flows: the delivery loop (:mod:`.deliverer`) over the transport contract
(:mod:`.transport`: one attempt to one target, classified), the HTTP transports (:mod:`.lean_http`, the
default, and :mod:`.http` on aiohttp), the protocol router in front of every transport (:mod:`.router`:
inline URLs and HTTP targets to HTTP, each named target's protocol to its own transport, loaded on first
use; :mod:`.transports` builds it over the HTTP transport ``callbacks.transport`` names), the
gRPC transport (:mod:`.grpc_transport`, ``Receiver.Fire``; its generated modules in :mod:`.grpc_proto`) and
their in-memory twin (:mod:`.recording`), the message of a flow (:mod:`.message`), signing (:mod:`.signing`),
retry policy (:mod:`.retry`), per-app limits (:mod:`.limiter` on :mod:`.token_bucket`), and the target
policy (:mod:`.ssrf`) judged on the callback URL model (:mod:`tjobs.targets.urls`).

:class:`HttpTransport` (aiohttp) is imported on first access of the name, so importing this package, or
any module of it, does not load aiohttp for a node on the lean transport."""

from typing import TYPE_CHECKING, Any

from tjobs.delivery.deliverer import CallbackJob, Deliverer, FlowRecorder
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.recording import Answer, RecordingTransport
from tjobs.delivery.retry import classify, compute_backoff_ms, parse_retry_after
from tjobs.delivery.signing import generate_secret, sign, signature_header, verify
from tjobs.delivery.transport import (
    AttemptResult,
    CallbackRequest,
    Outcome,
    Route,
    TargetPolicy,
    TargetRejected,
    Transport,
)

if TYPE_CHECKING:
    from tjobs.delivery.http import HttpTransport

__all__ = [
    "Answer",
    "AppLimiter",
    "AttemptResult",
    "CallbackJob",
    "CallbackRequest",
    "Deliverer",
    "FlowRecorder",
    "HttpTransport",
    "Outcome",
    "RecordingTransport",
    "Route",
    "TargetPolicy",
    "TargetRejected",
    "Transport",
    "classify",
    "compute_backoff_ms",
    "generate_secret",
    "parse_retry_after",
    "sign",
    "signature_header",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name == "HttpTransport":
        from tjobs.delivery.http import HttpTransport

        return HttpTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
