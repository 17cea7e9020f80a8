"""Operations written once and turned into the methods of each client flavour.

An API operation is one method of :class:`tjobs.client._calls.Api` that builds a :class:`Call` (verb,
path, params, body, idempotency, parser) marked ``@operation``, or builds :class:`Pages` marked
``@paging``. A flavour (the sync ``Client``, the async ``AsyncClient``) subclasses ``Api`` and says only
how to send a call and how to wrap a builder (``_method``, ``_iteration``); when the flavour class is
created, every operation it inherits becomes a real method of it, named, documented and signed as
its builder with the flavour's return type.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, overload

from tjobs.client.models import Page

if TYPE_CHECKING:
    from tjobs.client.async_ import AsyncClient
    from tjobs.client.sync import Client

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    idempotent: bool = False  # safe to resend after a lost answer
    missing_ok: bool = False  # a 404 on a resend means the first attempt did it (delete)


@dataclass(frozen=True, slots=True)
class Pages(Generic[T]):
    """A listing read page by page: ``page(cursor)`` is the call for the page at ``cursor``."""

    page: Callable[[str | None], Call[Page[T]]]

    def after(self, page: Page[T] | None) -> Call[Page[T]] | None:
        """The call for the page after ``page`` (``None``: the first), or ``None`` past the last."""
        if page is None:
            return self.page(None)
        return None if page.next_cursor is None else self.page(page.next_cursor)


class _Builder(Generic[P, T]):
    """An operation's builder, held on ``Api``; the flavour's class gets the method made from it."""

    returns: ClassVar[str]  # how the flavour's method's return annotation wraps the built value's

    def __init__(self, build: Callable[Concatenate[Any, P], T]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    def method_for(self, flavour: type[Flavour]) -> Callable[..., Any]:
        method = self.wrap(flavour, self.build)
        signature = inspect.signature(self.build)
        this, *rest = signature.parameters.values()  # ``self, /`` where ``**fields`` follow: as a method's
        signature = signature.replace(parameters=[this.replace(kind=this.POSITIONAL_OR_KEYWORD), *rest])
        built = str(signature.return_annotation)
        returns = self.returns.format(built[built.index("[") + 1 : -1], iterator=flavour._ITERATOR)
        method.__name__ = self.build.__name__
        method.__qualname__ = f"{flavour.__qualname__}.{self.build.__name__}"
        method.__module__ = flavour.__module__
        method.__doc__ = self.build.__doc__
        method.__annotations__ = {**self.build.__annotations__, "return": returns}
        method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
        return method

    def wrap(self, flavour: type[Flavour], build: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError


class Operation(_Builder[P, Call[T]]):
    """``@operation``: a method building one :class:`Call`; the client's method sends it."""

    returns = "{}"

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Operation[P, T]: ...
    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, client: AsyncClient, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, client: object, owner: type[Any]) -> Any:
        return self  # on a flavour, the method made from it stands in its place

    def wrap(self, flavour: type[Flavour], build: Callable[..., Any]) -> Callable[..., Any]:
        return flavour._method(build)


class Paging(_Builder[P, Pages[T]]):
    """``@paging``: a method building :class:`Pages`; the client's method iterates over their items."""

    returns = "{iterator}[{}]"

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Paging[P, T]: ...
    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, Iterator[T]]: ...
    @overload
    def __get__(self, client: AsyncClient, owner: type[Any]) -> Callable[P, AsyncIterator[T]]: ...
    def __get__(self, client: object, owner: type[Any]) -> Any:
        return self

    def wrap(self, flavour: type[Flavour], build: Callable[..., Any]) -> Callable[..., Any]:
        return flavour._iteration(build)


def operation(build: Callable[Concatenate[Any, P], Call[T]]) -> Operation[P, T]:
    return Operation(build)


def paging(build: Callable[Concatenate[Any, P], Pages[T]]) -> Paging[P, T]:
    return Paging(build)


class Flavour:
    """A client flavour: how a built call is sent (``_method``) and a listing iterated (``_iteration``)."""

    _ITERATOR: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_ITERATOR" not in vars(cls):
            return  # the operations' holder itself, or a subclass of a flavour: keeps what it has
        for name in dir(cls):
            member = inspect.getattr_static(cls, name)
            if isinstance(member, _Builder):
                setattr(cls, name, member.method_for(cls))

    @staticmethod
    def _method(build: Callable[..., Call[Any]]) -> Callable[..., Any]:
        raise NotImplementedError

    @staticmethod
    def _iteration(build: Callable[..., Pages[Any]]) -> Callable[..., Any]:
        raise NotImplementedError
