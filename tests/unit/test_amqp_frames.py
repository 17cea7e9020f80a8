"""The publish frames the AMQP transport writes are the bytes aiormq/pamqp write for the same publish."""

from __future__ import annotations

import pytest
from aiormq.abc import ChannelFrame
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.common import FieldValue
from pamqp.header import ContentHeader

from tjobs.delivery.amqp_frames import publish_frames

MAX_BODY_FRAME = 131072 - 8


def pamqp_bytes(
    channel: int,
    *,
    exchange: str,
    routing_key: str,
    mandatory: bool,
    body: bytes,
    headers: dict[str, str],
    content_type: str | None,
    delivery_mode: int,
    message_id: str,
    max_body_frame: int,
) -> bytes:
    properties = spec.Basic.Properties(
        content_type=content_type,
        headers=dict[str, FieldValue](headers),
        delivery_mode=delivery_mode,
        message_id=message_id,
    )
    frames: list[object] = [
        spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
        ContentHeader(properties=properties, body_size=len(body)),
    ]
    frames += [ContentBody(body[i : i + max_body_frame]) for i in range(0, len(body), max_body_frame)]
    return ChannelFrame.marshall(channel_number=channel, frames=frames).payload  # type: ignore[arg-type]


CASES = [
    pytest.param(
        {
            "exchange": "",
            "routing_key": "q",
            "mandatory": True,
            "body": b'{"a": 1}',
            "headers": {
                "webhook-id": "flow-1",
                "webhook-signature": "v1,abc=",
                "tjobs-task-id": "t-1",
                "content-type": "application/json",
                "x-ünïcode": "välue ✓",
            },
            "content_type": "application/json",
            "delivery_mode": 2,
            "message_id": "flow-1",
        },
        id="fire",
    ),
    pytest.param(
        {
            "exchange": "events",
            "routing_key": "a.b.c",
            "mandatory": False,
            "body": b"",
            "headers": {"webhook-id": "f"},
            "content_type": None,
            "delivery_mode": 1,
            "message_id": "f",
        },
        id="transient-empty-body-no-content-type",
    ),
    pytest.param(
        {
            "exchange": "x",
            "routing_key": "r",
            "mandatory": True,
            "body": bytes(range(256)) * 1200,
            "headers": {"k" * 200: "v" * 70000, "b": ""},
            "content_type": "application/octet-stream",
            "delivery_mode": 2,
            "message_id": "m" * 255,
        },
        id="body-over-frame-max-long-key-and-value",
    ),
]


@pytest.mark.parametrize("publish", CASES)
@pytest.mark.parametrize("channel", [1, 7, 65535])
def test_publish_frames_are_pamqps_bytes(publish: dict[str, object], channel: int) -> None:
    ours = publish_frames(channel, max_body_frame=MAX_BODY_FRAME, **publish)  # type: ignore[arg-type]
    assert ours == pamqp_bytes(channel, max_body_frame=MAX_BODY_FRAME, **publish)  # type: ignore[arg-type]


def test_body_of_exactly_one_frame_is_one_body_frame() -> None:
    body = b"x" * 16
    ours = publish_frames(
        1,
        exchange="",
        routing_key="q",
        mandatory=True,
        body=body,
        headers={},
        content_type=None,
        delivery_mode=2,
        message_id="m",
        max_body_frame=16,
    )
    assert ours.endswith(b"\x03\x00\x01\x00\x00\x00\x10" + body + b"\xce")
    assert ours.count(body) == 1


@pytest.mark.parametrize("field", ["exchange", "routing_key", "content_type", "message_id"])
def test_short_string_over_255_bytes_is_refused(field: str) -> None:
    publish: dict[str, object] = {
        "exchange": "",
        "routing_key": "q",
        "mandatory": True,
        "body": b"",
        "headers": {},
        "content_type": "application/json",
        "delivery_mode": 2,
        "message_id": "m",
    }
    publish[field] = "é" * 128
    with pytest.raises(ValueError, match="255 bytes"):
        publish_frames(1, max_body_frame=MAX_BODY_FRAME, **publish)  # type: ignore[arg-type]
