"""HTML error pages for every answer under ``/console`` that no console route gives itself.

A console route answers its own errors as pages (:class:`tjobs.console.context.ConsoleRoute`: a
:class:`~tjobs.errors.TjobsError`'s status, or 500 for anything unexpected). What is left are the
router's own answers: a path under ``/console`` that no route has (404) or a method it does not take
(405). :func:`install_error_pages` puts a handler in front of the API's for those: under ``/console`` it
renders the console's error page (in the console's layout, with the navigation when a session is
signed in, and a link back); anywhere else (``/v1``, ``/metrics``, ...) the API's handler answers JSON as
before.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from tjobs.console.context import SignInRequired, console_of
from tjobs.errors import TjobsError

MESSAGES = {404: "There is no such page in the console.", 405: "This page does not take that method."}


def is_console_path(path: str) -> bool:
    return path == "/console" or path.startswith("/console/")


def install_error_pages(api: FastAPI) -> None:
    """Answer the router's 404 and 405 under ``/console`` with the console's error page."""
    api_handler = cast(Any, api.exception_handlers[StarletteHTTPException])

    async def console_or_api(request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        if not is_console_path(request.url.path):
            response: Response = await api_handler(request, error)
            return response
        console = console_of(request)
        with contextlib.suppress(SignInRequired, TjobsError):  # the navigation, for a signed-in session
            await console.principal(request)
        message = MESSAGES.get(error.status_code, str(error.detail))
        return console.error_page(request, error.status_code, message, dict(error.headers or {}))

    api.add_exception_handler(StarletteHTTPException, console_or_api)
