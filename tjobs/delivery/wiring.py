"""The node's transport: the protocol router (:mod:`tjobs.delivery.router`) in front of the HTTP
transport ``callbacks.transport`` names (the lean one, or aiohttp) and, loaded on first use, the
transport of each other protocol a named target speaks."""

from __future__ import annotations

from collections.abc import Mapping

from tjobs.delivery.lean_http import LeanHttpTransport
from tjobs.delivery.router import ProtocolRouter
from tjobs.delivery.transport import TargetPolicy, Transport
from tjobs.settings import CallbackSettings
from tjobs.targets.addresses import NO_ADDRESSES, AddressAllowList
from tjobs.targets.model import Protocol


def build_http_transport(settings: CallbackSettings, policy: TargetPolicy | None = None) -> Transport:
    """The HTTP transport ``settings.transport`` names (validated with the settings: no other value loads).
    The aiohttp one is imported only when named, so a node on the default lean transport never loads aiohttp."""
    if settings.transport == "aiohttp":
        from tjobs.delivery.http import HttpTransport

        return HttpTransport(settings, policy=policy)
    return LeanHttpTransport(settings, policy=policy)


def build_transport(
    settings: CallbackSettings,
    policy: TargetPolicy | None = None,
    *,
    allowed_addresses: AddressAllowList = NO_ADDRESSES,
    transports: Mapping[Protocol, Transport] | None = None,
    http: Transport | None = None,
) -> ProtocolRouter:
    """The router over the HTTP transport (``http``, else the one ``settings.transport`` names, with
    ``policy``) and the other protocols' transports (``transports``, else each loaded on first use)."""
    return ProtocolRouter(
        http or build_http_transport(settings, policy),
        settings,
        allowed_addresses=allowed_addresses,
        transports=transports,
    )
