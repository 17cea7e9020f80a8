"""The callbacks package's public surface is explicit: other parts of tjobs code against these names."""

from __future__ import annotations

import tjobs.delivery


def test_public_names_are_pinned() -> None:
    assert sorted(tjobs.delivery.__all__) == [
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
    for name in tjobs.delivery.__all__:
        assert getattr(tjobs.delivery, name) is not None
