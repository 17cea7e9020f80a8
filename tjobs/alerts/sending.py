"""Sending one notification to one channel: the URL kinds through the node's callback transport (so
through the same target policy, :class:`tjobs.delivery.ssrf.TargetGuard`, judged again at this send),
e-mail through the node's SMTP server with :mod:`smtplib` in a thread.

A send is tried once; its error is returned (and logged by the evaluator), never raised: a channel that
fails does not stop the others. A firing notification whose sends all failed is tried again at the next
pass (:mod:`tjobs.alerts.evaluator`).
"""

from __future__ import annotations

import asyncio
import smtplib
from email.message import EmailMessage

from tjobs.alerts.channels import Channel, Notification, dingtalk_url, email_message, message_body
from tjobs.clock import Clock
from tjobs.delivery.allow_list import AllowList
from tjobs.delivery.signing import signature_header
from tjobs.delivery.transport import CallbackRequest, Transport
from tjobs.model import Outcome
from tjobs.settings import AlertingSettings


class ChannelSender:
    def __init__(self, transport: Transport, settings: AlertingSettings, clock: Clock, user_agent: str) -> None:
        self._transport = transport
        self._settings = settings
        self._clock = clock
        self._user_agent = user_agent

    async def send(self, channel: Channel, notification: Notification, allow: AllowList) -> str | None:
        """Send; ``None`` when the channel took it (2xx, or the SMTP server accepted the mail), else why not."""
        if channel.kind == "email":
            return await self._mail(notification, list(channel.settings["to"]))
        now_ms = self._clock.now_ms()
        body = message_body(channel, notification)
        url = str(channel.settings["url"])
        headers = {"content-type": "application/json", "user-agent": self._user_agent}
        secret = channel.settings.get("secret")
        if channel.kind == "webhook" and isinstance(secret, str):
            timestamp_s = now_ms // 1000
            headers["webhook-id"] = notification.id
            headers["webhook-timestamp"] = str(timestamp_s)
            headers["webhook-signature"] = signature_header([secret], notification.id, timestamp_s, body)
        elif channel.kind == "dingtalk" and isinstance(secret, str):
            url = dingtalk_url(url, secret, now_ms)
        request = CallbackRequest(
            app_id=notification.app_id or "",
            flow_id=notification.id,
            url=url,
            method="POST",
            headers=headers,
            body=body,
            timeout_ms=self._settings.send_timeout_ms,
            attempt=1,
            allow_list=allow,
        )
        result = await self._transport.send(request)
        return None if result.outcome is Outcome.DELIVERED else (result.error or f"HTTP {result.status}")

    async def _mail(self, notification: Notification, to: list[str]) -> str | None:
        settings = self._settings
        if not settings.smtp_host:
            return "no SMTP server configured (alerts.smtp_host)"
        message = email_message(notification, settings.smtp_from, to)
        try:
            await asyncio.to_thread(self._send_mail, message)
        except (OSError, smtplib.SMTPException) as error:
            return f"SMTP: {type(error).__name__}: {error}"[:240]
        return None

    def _send_mail(self, message: EmailMessage) -> None:
        settings = self._settings
        assert settings.smtp_host is not None
        timeout_s = settings.send_timeout_ms / 1000
        with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout_s) as smtp:
            if settings.smtp_starttls:
                smtp.starttls()
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            smtp.send_message(message)
