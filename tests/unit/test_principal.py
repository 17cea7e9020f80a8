"""The caller a request's authentication recorded (:mod:`tjobs.api.principal`)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from tjobs.api.principal import Principal, principal_of, remember
from tjobs.errors import Unauthorized


def _request(client: tuple[str, int] | None) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/", "headers": [], "client": client})


def test_remembered_caller_is_read_back_with_its_address() -> None:
    request = _request(("10.1.2.3", 5555))
    remember(request, "app_key", "orders", "orders")
    assert principal_of(request) == Principal("app_key", "orders", "orders", "10.1.2.3")


def test_an_unknown_peer_is_an_empty_source() -> None:
    request = _request(None)
    assert remember(request, "admin_key", "admin", None).source == ""


def test_a_request_nobody_authenticated_has_no_principal() -> None:
    with pytest.raises(Unauthorized):
        principal_of(_request(("127.0.0.1", 1)))
