"""Callbacks: signing (:mod:`.signing`), retry policy (:mod:`.retry`), per-app limits (:mod:`.limiter`),
one HTTP attempt (:mod:`.sender`), the message of a flow (:mod:`.message`) and the delivery loop
(:mod:`.delivery`)."""

from tjobs.callbacks.delivery import CallbackJob, Deliverer, FlowRecorder
from tjobs.callbacks.limiter import AppLimiter
from tjobs.callbacks.retry import Outcome, TargetRejected, classify, compute_backoff_ms, parse_retry_after
from tjobs.callbacks.sender import AttemptResult, CallbackRequest, CallbackSender, TargetPolicy
from tjobs.callbacks.signing import generate_secret, sign, signature_header, verify

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
