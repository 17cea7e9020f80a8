"""What both clients are made of (:class:`tjobs.client.Client`, :class:`tjobs.client.AsyncClient`): the
operations of :class:`tjobs.client._calls.Api`, an httpx client of the flavour's kind (``_HTTP``) on the base
URL with the API key as a bearer token, and the retry policy its calls are sent under."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import httpx

from tjobs.client._calls import Api

HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)


class ClientBase(Api, Generic[HttpT, TransportT]):
    _HTTP: Callable[..., HttpT]

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        transport: TransportT | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        headers = {**(headers or {}), **({"authorization": f"Bearer {api_key}"} if api_key else {})}
        self._http: HttpT = self._HTTP(base_url=base_url, headers=headers, timeout=timeout_s, transport=transport)
        self._retries = retries
        self._backoff_s = backoff_s
