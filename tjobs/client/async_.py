"""The asynchronous client: the operations of :class:`tjobs.client._calls.Api`, awaited, sent with
``httpx.AsyncClient`` (the same methods as :class:`tjobs.client.Client`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import httpx

from tjobs.client._base import ClientBase
from tjobs.client._calls import Api
from tjobs.client._operation import Call, Pages
from tjobs.client._retry import Exchange

T = TypeVar("T")


class AsyncClient(ClientBase[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    __doc__ = f"``AsyncClient(base_url, api_key)``: {Api.__doc__}"
    _ITERATOR = "AsyncIterator"
    _HTTP = httpx.AsyncClient

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, exchange: Exchange[Any]) -> httpx.Response | httpx.TransportError:
        try:
            return await self._http.request(**exchange.request())
        except httpx.TransportError as error:
            return error

    async def _run(self, call: Call[T]) -> T:
        exchange = Exchange(call, self._retries, self._backoff_s)
        while (delay := exchange.after(await self._send(exchange))) is not None:  # noqa: ASYNC110 (a backoff)
            await asyncio.sleep(delay)
        return exchange.result()

    @staticmethod
    def _method(build: Callable[..., Call[Any]]) -> Callable[..., Any]:
        async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
            return await self._run(build(self, *args, **kwargs))

        return method

    @staticmethod
    def _iteration(build: Callable[..., Pages[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def iteration(self: AsyncClient, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            pages, page = build(self, *args, **kwargs), None
            while (call := pages.after(page)) is not None:
                page = await self._run(call)
                for item in page.items:
                    yield item

        return iteration
