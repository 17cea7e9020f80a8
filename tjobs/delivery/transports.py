"""The node's HTTP transport, chosen by ``callbacks.transport``: the lean one, or aiohttp."""

from __future__ import annotations

from tjobs.delivery.http import HttpTransport
from tjobs.delivery.lean_http import LeanHttpTransport
from tjobs.delivery.transport import TargetPolicy, Transport
from tjobs.settings import CallbackSettings


def build_transport(settings: CallbackSettings, policy: TargetPolicy | None = None) -> Transport:
    """The transport ``settings.transport`` names (validated with the settings: no other value loads)."""
    if settings.transport == "aiohttp":
        return HttpTransport(settings, policy=policy)
    return LeanHttpTransport(settings, policy=policy)
