"""The tjobs Python SDK: sync and async clients, typed models, schedule builders, callback verification.

::

    from tjobs.client import Client, delay, verify

    with Client("http://127.0.0.1:8080", api_key) as tjobs:
        task = tjobs.create_task("close-order-123", delay(minutes=30), "https://orders.example/close",
                                 key="order-123-close", payload={"order": 123})

    # in your receiver, whatever the framework:
    callback = verify(raw_body, request_headers, signing_secret)   # raises WebhookVerificationError
    if already_done(callback.flow_id): ...                          # the idempotency key

Depends only on httpx and pydantic, and on tjobs.wire (the request shapes, pydantic only), never on the
server's modules.
"""

from tjobs.client._calls import task_request
from tjobs.client.async_ import AsyncClient
from tjobs.client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    NotFound,
    QuotaExceeded,
    ServerError,
    TjobsClientError,
    TransportError,
    Unauthorized,
    VersionConflict,
    WebhookVerificationError,
)
from tjobs.client.models import (
    App,
    AppDeleted,
    AppStats,
    BatchItem,
    BatchResult,
    Callback,
    DeadLetterCount,
    ErrorDetail,
    Flow,
    FlowCount,
    FlowRun,
    Lateness,
    OperatorJob,
    Page,
    PreviewInstant,
    RedriveItem,
    RedriveResult,
    RunLogged,
    RunLogLine,
    RunReportAnswer,
    SchedulePreview,
    Target,
    Task,
    TaskHealth,
)
from tjobs.client.schedules import Schedule, at, cron, delay, every, fixed_delay
from tjobs.client.sync import Client
from tjobs.client.webhooks import VerifiedCallback, verify

__all__ = [
    "ApiError",
    "App",
    "AppDeleted",
    "AppStats",
    "AsyncClient",
    "BadRequest",
    "BatchItem",
    "BatchResult",
    "Callback",
    "Client",
    "Conflict",
    "DeadLetterCount",
    "ErrorDetail",
    "Flow",
    "FlowCount",
    "FlowRun",
    "Lateness",
    "NotFound",
    "OperatorJob",
    "Page",
    "PreviewInstant",
    "QuotaExceeded",
    "RedriveItem",
    "RedriveResult",
    "RunLogLine",
    "RunLogged",
    "RunReportAnswer",
    "Schedule",
    "SchedulePreview",
    "ServerError",
    "Target",
    "Task",
    "TaskHealth",
    "TjobsClientError",
    "TransportError",
    "Unauthorized",
    "VerifiedCallback",
    "VersionConflict",
    "WebhookVerificationError",
    "at",
    "cron",
    "delay",
    "every",
    "fixed_delay",
    "task_request",
    "verify",
]
