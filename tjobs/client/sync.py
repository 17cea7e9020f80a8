"""The synchronous client: the operations of :class:`tjobs.client._calls.Api`, sent with ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from tjobs.client._base import ClientBase
from tjobs.client._calls import Api
from tjobs.client._operation import Call, Pages
from tjobs.client._retry import Exchange

T = TypeVar("T")


class Client(ClientBase[httpx.Client, httpx.BaseTransport]):
    __doc__ = f"``Client(base_url, api_key)``: {Api.__doc__}"
    _ITERATOR = "Iterator"
    _HTTP = httpx.Client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, exchange: Exchange[Any]) -> httpx.Response | httpx.TransportError:
        try:
            return self._http.request(**exchange.request())
        except httpx.TransportError as error:
            return error

    def _run(self, call: Call[T]) -> T:
        exchange = Exchange(call, self._retries, self._backoff_s)
        while (delay := exchange.after(self._send(exchange))) is not None:
            time.sleep(delay)
        return exchange.result()

    @staticmethod
    def _method(build: Callable[..., Call[Any]]) -> Callable[..., Any]:
        def method(self: Client, *args: Any, **kwargs: Any) -> Any:
            return self._run(build(self, *args, **kwargs))

        return method

    @staticmethod
    def _iteration(build: Callable[..., Pages[Any]]) -> Callable[..., Iterator[Any]]:
        def iteration(self: Client, *args: Any, **kwargs: Any) -> Iterator[Any]:
            pages, page = build(self, *args, **kwargs), None
            while (call := pages.after(page)) is not None:
                page = self._run(call)
                yield from page.items

        return iteration
