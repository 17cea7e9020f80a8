"""Alert channels: where a notification goes, and what it looks like there (pure: no I/O here; the
sending is :mod:`tjobs.alerts.sending`'s).

==============  ==========================================================================================
kind            settings and message
==============  ==========================================================================================
``webhook``     ``url``, ``secret`` (``whsec_...``, generated when not given): a JSON ``alert.firing`` or
                ``alert.resolved`` event signed as callbacks are (Standard Webhooks: ``webhook-id`` is the
                notification's id, ``webhook-signature`` HMAC-SHA256 with the channel's secret)
``slack``       ``url`` (an incoming webhook): ``{"text": ...}``
``dingtalk``    ``url`` (a robot's webhook), optional ``secret`` (``SEC...``: the robot's signing, a
                ``timestamp`` and ``sign`` added to the URL): ``{"msgtype": "markdown", ...}``
``wecom``       ``url`` (a group robot's webhook): ``{"msgtype": "markdown", "markdown": {"content": ...}}``
``email``       ``to`` (1-20 addresses): a mail through the node's SMTP server (``alerts.smtp_*``)
==============  ==========================================================================================

A channel's URL is judged by the callbacks' target policy (:class:`tjobs.delivery.ssrf.TargetGuard`)
when it is stored and again at every send. Answers never show a secret (``"***"``), except the
answer to the create that generated it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any, Literal

import orjson

from tjobs.alerts.rules import merged_body
from tjobs.clock import iso_ms
from tjobs.delivery.signing import generate_secret, secret_key
from tjobs.errors import InvalidInput

ChannelKind = Literal["webhook", "slack", "dingtalk", "wecom", "email"]
CHANNEL_KINDS: tuple[ChannelKind, ...] = ("webhook", "slack", "dingtalk", "wecom", "email")
URL_KINDS = frozenset({"webhook", "slack", "dingtalk", "wecom"})
MAX_RECIPIENTS = 20
MAX_URL_CHARS = 2048
HIDDEN = "***"
_ADDRESS = re.compile(r"^[^@\s<>,;]{1,64}@[A-Za-z0-9.-]{1,253}$")


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    app_id: str | None  # None: global, the admin's
    name: str
    kind: ChannelKind
    settings: Mapping[str, Any]  # url, secret, to

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "settings": dict(self.settings)}

    def shown(self, *, reveal_secret: bool = False) -> dict[str, Any]:
        """The API's view: the secret hidden unless ``reveal_secret`` (the create that generated it)."""
        settings = dict(self.settings)
        if settings.get("secret") and not reveal_secret:
            settings["secret"] = HIDDEN
        return {"id": self.id, "app_id": self.app_id, "name": self.name, "kind": self.kind, "settings": settings}


@dataclass(frozen=True, slots=True)
class Notification:
    """One message about one rule's subject: it fires (``firing``; ``repeat`` when it is a reminder)
    or it stopped (``resolved``)."""

    rule_id: str
    rule_name: str
    rule_kind: str
    app_id: str | None
    subject: str
    status: Literal["firing", "resolved"]
    summary: str
    since_ms: int
    at_ms: int
    repeat: bool = False

    @property
    def dedup_key(self) -> str:
        """The same for every message about one firing of one subject: a receiver may group by it."""
        return f"{self.rule_id}/{self.subject}/{self.since_ms}"

    @property
    def id(self) -> str:
        """Unique per message (the webhook's ``webhook-id``)."""
        return f"{self.dedup_key}/{self.status}/{self.at_ms}"

    def title(self) -> str:
        mark = "RESOLVED" if self.status == "resolved" else ("FIRING (repeat)" if self.repeat else "FIRING")
        return f"[tjobs {mark}] {self.rule_name}: {self.subject}"

    def text(self) -> str:
        scope = f"app {self.app_id}" if self.app_id else "cluster"
        lines = [self.title(), self.summary, f"{scope}; since {iso_ms(self.since_ms)}"]
        if self.status == "resolved":
            lines.append(f"resolved at {iso_ms(self.at_ms)}")
        return "\n".join(lines)

    def event(self) -> dict[str, Any]:
        return {
            "type": f"alert.{self.status}",
            "id": self.id,
            "dedup_key": self.dedup_key,
            "rule": {"id": self.rule_id, "name": self.rule_name, "kind": self.rule_kind},
            "app_id": self.app_id,
            "subject": self.subject,
            "status": self.status,
            "repeat": self.repeat,
            "summary": self.summary,
            "since": iso_ms(self.since_ms),
            "at": iso_ms(self.at_ms),
        }


# ---- parsing --------------------------------------------------------------------------------------


def _url(raw: Any) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > MAX_URL_CHARS:
        raise InvalidInput("settings.url", f"must be an http(s) URL of at most {MAX_URL_CHARS} characters")
    if urllib.parse.urlsplit(raw).scheme not in ("http", "https"):
        raise InvalidInput("settings.url", "must be an http(s) URL")
    return raw


def _webhook_secret(secret: Any) -> bool:
    if not isinstance(secret, str) or not secret.startswith("whsec_"):
        return False
    try:
        secret_key(secret)
    except ValueError:
        return False
    return True


def parse_settings(kind: str, raw: Any, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings of a channel of ``kind``, checked (422 naming ``settings.<field>``); a secret left
    out or given as ``"***"`` keeps ``previous``'s (a webhook's: a new one when there is none)."""
    if not isinstance(raw, dict):
        raise InvalidInput("settings", "must be a JSON object")
    previous = previous or {}
    allowed = {"url", "secret"} if kind in ("webhook", "dingtalk") else ({"url"} if kind in URL_KINDS else {"to"})
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise InvalidInput(f"settings.{unknown[0]}", f"is not a setting of {kind} channels")
    if kind == "email":
        to = raw.get("to")
        if isinstance(to, str):
            to = [to]
        if (
            not isinstance(to, list)
            or not 0 < len(to) <= MAX_RECIPIENTS
            or not all(isinstance(a, str) and _ADDRESS.fullmatch(a) for a in to)
        ):
            raise InvalidInput("settings.to", f"must be 1 to {MAX_RECIPIENTS} e-mail addresses")
        return {"to": list(dict.fromkeys(to))}
    settings: dict[str, Any] = {"url": _url(raw.get("url"))}
    if kind in ("webhook", "dingtalk"):
        secret = raw.get("secret")
        if secret is None or secret == HIDDEN:
            secret = previous.get("secret") or (generate_secret() if kind == "webhook" else None)
        if kind == "webhook":
            if not _webhook_secret(secret):
                raise InvalidInput("settings.secret", "must be whsec_ followed by base64 (or left out: one is made)")
        elif secret is not None and (not isinstance(secret, str) or not 0 < len(secret) <= 200):
            raise InvalidInput("settings.secret", "must be the robot's signing secret (SEC...)")
        if secret is not None:
            settings["secret"] = secret
    return settings


def parse_channel(channel_id: str, app_id: str | None, body: Any, *, partial_of: Channel | None = None) -> Channel:
    """A channel from a request body (or, with ``partial_of``, that channel with the body's changes)."""
    merged, name, kind = merged_body(body, partial_of, {"name", "kind", "settings"}, "channel", CHANNEL_KINDS)
    previous = partial_of.settings if partial_of is not None else None
    return Channel(channel_id, app_id, name, kind, parse_settings(kind, merged.get("settings"), previous))


def channel_from_document(channel_id: str, app_id: str | None, document: Mapping[str, Any]) -> Channel:
    return Channel(channel_id, app_id, document["name"], document["kind"], dict(document.get("settings", {})))


# ---- messages --------------------------------------------------------------------------------------


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def message_body(channel: Channel, notification: Notification) -> bytes:
    """The JSON body ``channel`` (a URL kind) is sent for ``notification``."""
    if channel.kind == "webhook":
        return _json(notification.event())
    if channel.kind == "slack":
        return _json({"text": notification.text()})
    if channel.kind == "dingtalk":
        text = notification.text().replace("\n", "\n\n")
        return _json({"msgtype": "markdown", "markdown": {"title": notification.title(), "text": text}})
    if channel.kind == "wecom":
        return _json({"msgtype": "markdown", "markdown": {"content": notification.text()}})
    raise ValueError(f"a {channel.kind} channel has no HTTP message")


def dingtalk_url(url: str, secret: str, now_ms: int) -> str:
    """A DingTalk robot's URL signed at ``now_ms``: ``timestamp`` and ``sign`` (base64 of
    HMAC-SHA256 of ``"{timestamp}\\n{secret}"`` keyed with the secret, URL-encoded) appended."""
    mac = hmac.new(secret.encode(), f"{now_ms}\n{secret}".encode(), hashlib.sha256).digest()
    sign = urllib.parse.quote_plus(base64.b64encode(mac).decode())
    return f"{url}{'&' if '?' in url else '?'}timestamp={now_ms}&sign={sign}"


def email_message(notification: Notification, sender: str, to: list[str]) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = notification.title()
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["X-Tjobs-Alert"] = notification.dedup_key
    message["X-Tjobs-Alert-Status"] = notification.status
    message.set_content(notification.text() + "\n")
    return message
