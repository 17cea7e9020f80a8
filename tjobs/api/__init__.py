"""The HTTP API (``/v1``): FastAPI app factory, rendering, auth and the one error handler."""

from tjobs.api.app import create_api

__all__ = ["create_api"]
