"""Alert notifications reach real receivers: a signed webhook (checked with the ``standardwebhooks``
library), the Slack, DingTalk and WeCom formats on a local HTTP sink, and mail through a real SMTP server
process (``python -m aiosmtpd``), firing then resolved, end to end through the evaluator."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import hashlib
import hmac
import json
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from standardwebhooks import Webhook

from tests.receiver import Receiver, unused_port
from tjobs.alerts.channels import Channel, Notification, dingtalk_url, parse_channel
from tjobs.alerts.evaluator import AlertEvaluator
from tjobs.alerts.sending import ChannelSender
from tjobs.clock import Clock, SystemClock
from tjobs.cluster.local import LocalCoordinator
from tjobs.delivery.allow_list import EMPTY_ALLOW_LIST, AllowList
from tjobs.delivery.ssrf import TargetGuard
from tjobs.delivery.wiring import build_transport
from tjobs.model import SloCounts, SloMinute
from tjobs.settings import AlertingSettings, CallbackSettings
from tjobs.stores.contracts.alerts import AlertSetting
from tjobs.stores.memory import MemoryTaskStore
from tjobs.stores.memory_alerts import MemoryAlertSettings

pytestmark = pytest.mark.asyncio

T0 = 1_800_000_000_000
FIRING = Notification("rule_1", "dlq", "dead_letters", "a", "dead_letters", "firing", "3 dead letters", T0, T0)


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def now_ms(self) -> int:
        return self.now


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as started:
        yield started


def _sender(alerting: AlertingSettings | None = None, clock: Clock | None = None) -> ChannelSender:
    transport = build_transport(CallbackSettings(), TargetGuard(allow_loopback=True).policy)
    return ChannelSender(transport, alerting or AlertingSettings(), clock or _Clock(), "tjobs-test")


async def test_a_webhook_notification_is_signed_as_callbacks_are(receiver: Receiver) -> None:
    channel = parse_channel("chan_1", None, {"name": "hook", "kind": "webhook", "settings": {"url": receiver.url()}})
    secret = str(channel.settings["secret"])
    assert await _sender(clock=SystemClock()).send(channel, FIRING, EMPTY_ALLOW_LIST) is None  # signed now
    (received,) = await receiver.wait_for(1)
    headers = {name.lower(): value for name, value in received.headers.items()}
    event = Webhook(secret).verify(received.body, headers)  # raises on a bad signature
    assert headers["webhook-id"] == FIRING.id
    assert (
        event["type"] == "alert.firing"
        and event["dedup_key"] == FIRING.dedup_key
        and event["subject"] == "dead_letters"
    )


async def test_a_refused_target_is_not_sent_to() -> None:
    channel = parse_channel("chan_1", None, {"name": "hook", "kind": "slack", "settings": {"url": "http://10.0.0.1/x"}})
    error = await _sender().send(channel, FIRING, EMPTY_ALLOW_LIST)
    assert error is not None and "refused: private address" in error


async def test_slack_dingtalk_and_wecom_get_their_own_formats(receiver: Receiver) -> None:
    sender = _sender()
    bodies = {}
    for kind, extra in (("slack", {}), ("dingtalk", {"secret": "SECabc"}), ("wecom", {})):
        settings = {"url": receiver.url(f"/{kind}"), **extra}
        channel = parse_channel("chan_1", None, {"name": kind, "kind": kind, "settings": settings})
        assert await sender.send(channel, FIRING, EMPTY_ALLOW_LIST) is None
        (received,) = await receiver.wait_for(1, path=f"/{kind}")
        bodies[kind] = json.loads(received.body)
    assert "3 dead letters" in bodies["slack"]["text"]
    assert bodies["dingtalk"]["msgtype"] == "markdown" and "FIRING" in bodies["dingtalk"]["markdown"]["title"]
    assert "3 dead letters" in bodies["wecom"]["markdown"]["content"]


async def test_a_dingtalk_url_is_signed_as_the_robot_expects() -> None:
    query = urllib.parse.parse_qs(
        urllib.parse.urlsplit(dingtalk_url("https://x/robot?access_token=t", "SECabc", T0)).query
    )
    expected = hmac.new(b"SECabc", f"{T0}\nSECabc".encode(), hashlib.sha256).digest()
    assert query == {"access_token": ["t"], "timestamp": [str(T0)], "sign": [base64.b64encode(expected).decode()]}


@pytest.fixture
def smtp_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real SMTP server process that writes every mail it takes to a file of its own."""
    port = unused_port()
    script = tmp_path / "sink.py"
    script.write_text(
        "import sys, time, pathlib\n"
        "from aiosmtpd.controller import Controller\n"
        "out = pathlib.Path(sys.argv[2])\n"
        "class Sink:\n"
        "    async def handle_DATA(self, server, session, envelope):\n"
        "        (out / f'{time.time_ns()}.eml').write_bytes(envelope.original_content)\n"
        "        return '250 OK'\n"
        "c = Controller(Sink(), hostname='127.0.0.1', port=int(sys.argv[1])); c.start()\n"
        "sys.stdin.read(); c.stop()\n"
    )
    mails = tmp_path / "mails"
    mails.mkdir()
    process = subprocess.Popen([sys.executable, str(script), str(port), str(mails)], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port, mails
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=10)


def _mails(folder: Path) -> list[email.message.EmailMessage]:
    return [
        email.message_from_bytes(path.read_bytes(), policy=email.policy.default) for path in sorted(folder.iterdir())
    ]


async def test_mail_goes_out_on_firing_and_again_on_resolved(smtp_server: tuple[int, Path]) -> None:
    port, mails = smtp_server
    clock = _Clock()
    alerting = AlertingSettings(smtp_host="127.0.0.1", smtp_port=port, smtp_from="alerts@tjobs.test")
    store, alerts = MemoryTaskStore(), MemoryAlertSettings()
    rule = {"name": "dlq", "kind": "dead_letters", "params": {"threshold": 2, "window_minutes": 5}}
    await alerts.put_alert_setting(AlertSetting("rule", "rule_1", "a", {**rule, "channels": ["chan_1"]}, 1, 1))
    channel = {"name": "ops", "kind": "email", "settings": {"to": ["ops@tjobs.test"]}}
    await alerts.put_alert_setting(AlertSetting("channel", "chan_1", "a", channel, 1, 1))
    await store.add_slo_minutes("n1", [SloMinute("a", T0 // 60_000, SloCounts(dead=3))])

    async def allow(app_id: str) -> AllowList:
        return EMPTY_ALLOW_LIST

    coordinator = LocalCoordinator(store.topology.shard_count, "n1")
    evaluator = AlertEvaluator(alerts, store, coordinator, _sender(alerting, clock), clock, allow, 60)
    assert await evaluator.evaluate(T0) == 1
    assert await evaluator.evaluate(T0 + 60_000) == 0  # still firing: deduplicated
    assert await evaluator.evaluate(T0 + 10 * 60_000) == 1  # the dead letters left the window
    for _ in range(50):
        if len(list(mails.iterdir())) >= 2:
            break
        await asyncio.sleep(0.1)
    firing, resolved = _mails(mails)
    assert firing["Subject"].startswith("[tjobs FIRING] dlq") and firing["To"] == "ops@tjobs.test"
    assert "3 dead letters" in firing.get_content()
    assert resolved["Subject"].startswith("[tjobs RESOLVED] dlq")
    assert firing["X-Tjobs-Alert"] == resolved["X-Tjobs-Alert"]  # one dedup key for the firing and its resolve


async def test_mail_without_an_smtp_server_configured_is_an_error_not_a_crash() -> None:
    channel = Channel("chan_1", None, "ops", "email", {"to": ["ops@tjobs.test"]})
    error = await _sender().send(channel, FIRING, EMPTY_ALLOW_LIST)
    assert error is not None and "smtp_host" in error
