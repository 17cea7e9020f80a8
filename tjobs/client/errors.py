"""Errors the SDK raises; every API error carries the server's ``code``, ``message`` and ``field``.

::

    TjobsClientError
    ├── TransportError            the request could not be sent or answered (after retries)
    ├── WebhookVerificationError  an incoming callback's signature is missing, stale or wrong
    └── ApiError                  the API answered 4xx/5xx
        ├── BadRequest            400/422: ``field`` names the offending field
        ├── Unauthorized          401
        ├── NotFound              404
        ├── Conflict              409 (``VersionConflict`` when ``code == "version_conflict"``)
        │   └── VersionConflict
        ├── QuotaExceeded         429
        └── ServerError           5xx
"""

from __future__ import annotations

from typing import Any


class TjobsClientError(Exception):
    """Root of every error the SDK raises."""


class TransportError(TjobsClientError):
    pass


class WebhookVerificationError(TjobsClientError):
    pass


class ApiError(TjobsClientError):
    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.details = details or {}  # e.g. target_in_use: {"tasks": n}
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class VersionConflict(Conflict):
    pass


class QuotaExceeded(ApiError):
    pass


class ServerError(ApiError):
    pass


def error_from(status: int, body: Any) -> ApiError:
    """The :class:`ApiError` for an error answer (``{"error": {"code", "message", "field"}}``)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        detail = {"code": "http_error", "message": str(body)[:200]}
    code = str(detail.get("code", "http_error"))
    message = str(detail.get("message", ""))
    field = detail.get("field")
    kind: type[ApiError]
    if status == 401:
        kind = Unauthorized
    elif status == 404:
        kind = NotFound
    elif status == 409:
        kind = VersionConflict if code == "version_conflict" else Conflict
    elif status == 429:
        kind = QuotaExceeded
    elif status >= 500:
        kind = ServerError
    elif status in (400, 413, 422):
        kind = BadRequest
    else:
        kind = ApiError
    details = detail.get("details")
    return kind(
        status, code, message, None if field is None else str(field), details if isinstance(details, dict) else None
    )
