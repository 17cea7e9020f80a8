"""The callbacks package's public surface is explicit: other parts of tjobs code against these names."""

from __future__ import annotations

import tjobs.callbacks


def test_public_names_are_pinned() -> None:
    assert sorted(tjobs.callbacks.__all__) == [
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
    for name in tjobs.callbacks.__all__:
        assert getattr(tjobs.callbacks, name) is not None
