"""The SDK's public surface is exactly ``__all__``, and every listed name exists (httpx's pattern)."""

from __future__ import annotations

import tjobs.client

EXPECTED = {
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
}


def test_the_sdk_exports_exactly_its_published_names() -> None:
    assert set(tjobs.client.__all__) == EXPECTED
    assert sorted(tjobs.client.__all__) == tjobs.client.__all__


def test_every_exported_name_exists_and_is_defined_in_the_sdk() -> None:
    for name in tjobs.client.__all__:
        member = getattr(tjobs.client, name)
        if name == "Schedule":  # a type alias: dict[str, Any]
            continue
        module = getattr(member, "__module__", "tjobs.client")
        assert module.startswith("tjobs.client"), (name, module)


def test_the_sdk_does_not_import_the_server() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tjobs.client; bad = [m for m in sys.modules if m.startswith(('tjobs.stores', "
        "'tjobs.node', 'tjobs.delivery', 'fastapi', 'sqlalchemy', 'aiohttp'))]; print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
