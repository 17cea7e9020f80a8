"""The real HTTP transports by name, for tests that hold each of them to the same assertions."""

from __future__ import annotations

from tjobs.delivery.http import HttpTransport
from tjobs.delivery.lean_http import LeanHttpTransport

HttpTransportClass = type[HttpTransport] | type[LeanHttpTransport]

HTTP_TRANSPORTS: dict[str, HttpTransportClass] = {"aiohttp": HttpTransport, "lean": LeanHttpTransport}
"""``callbacks.transport`` names and the transport each builds (the node's default: ``lean``)."""
