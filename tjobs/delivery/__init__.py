"""Delivery of committed flows: the delivery loop (:mod:`.deliverer`), one HTTP attempt (:mod:`.sender`),
the message of a flow (:mod:`.message`), signing (:mod:`.signing`), retry policy (:mod:`.retry`),
per-app limits (:mod:`.limiter` on :mod:`.token_bucket`), and the callback URL model (:mod:`.urls`) with
the target policy judged on it (:mod:`.ssrf`)."""

from tjobs.delivery.deliverer import CallbackJob, Deliverer, FlowRecorder
from tjobs.delivery.limiter import AppLimiter
from tjobs.delivery.retry import Outcome, TargetRejected, classify, compute_backoff_ms, parse_retry_after
from tjobs.delivery.sender import AttemptResult, CallbackRequest, CallbackSender, TargetPolicy
from tjobs.delivery.signing import generate_secret, sign, signature_header, verify

__all__ = [
    "AppLimiter",
    "AttemptResult",
    "CallbackJob",
    "CallbackRequest",
    "CallbackSender",
    "Deliverer",
    "FlowRecorder",
    "Outcome",
    "TargetPolicy",
    "TargetRejected",
    "classify",
    "compute_backoff_ms",
    "generate_secret",
    "parse_retry_after",
    "sign",
    "signature_header",
    "verify",
]
