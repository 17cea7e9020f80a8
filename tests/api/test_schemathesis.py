"""Property-based API conformance: every operation, many generated requests, 0 server errors and 0
responses that break the documented schema (status codes, content types and bodies).

The node runs for the module in a thread of its own (schemathesis calls it synchronously over HTTP);
the schema is the one ``/openapi.json`` serves. Requests carry an app's key (app routes) or the admin
key (app management), so generated cases reach the handlers instead of stopping at 401.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS as REGISTERED_CHECKS
from schemathesis.checks import load_all_checks

from tests.api.conftest import ADMIN_KEY
from tjobs.api import create_api
from tjobs.node import Node
from tjobs.settings import Settings, load_settings
from tjobs.testing import run_node


def _settings() -> Settings:
    # The run sends bursts of requests with wrong keys (ignored_auth) and of expensive reads; the API's
    # rate limits (tests/api/test_rate_limits.py) would answer some of them 429 instead of the answer
    # this suite checks, so they are lifted here.
    return load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "1x2x4"},
        api={"admin_key": ADMIN_KEY},
        rate_limits={"enabled": False},
        allow_loopback_callbacks=True,
    )


schema = schemathesis.openapi.from_dict(create_api(Node(_settings())).openapi())
load_all_checks()
# Every registered check but positive_data_acceptance: a schema-valid request may rightly be a 422 naming
# the field, because JSON Schema cannot say all the validation checks: a callback URL must resolve to an
# admitted address (DNS at registration), JSON Schema integers and 93.0 are not 64-bit integers, a cron
# expression or time zone can be well-typed and meaningless, and a cursor is opaque (5 operations fail it).
NOT_APPLICABLE = {"positive_data_acceptance"}
CHECKS = [check for check in REGISTERED_CHECKS.get_all() if check.__name__ not in NOT_APPLICABLE]


KEYS = {"admin": ADMIN_KEY, "app": ""}


@schema.auth(refresh_interval=None)
class _BearerKey:
    """The admin key for app management, the app's key elsewhere; registered as the schema's auth (under
    the header's documented spelling, ``Authorization``) so ignored_auth can take it away and try without."""

    def get(self, case: Any, context: Any) -> str:
        return KEYS["admin"] if case.path.startswith("/v1/apps") else KEYS["app"]

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


class _NodeThread:
    """A node (API + scheduler) serving from its own event loop until stopped."""

    def __init__(self) -> None:
        self.base_url = ""
        self.api_key = ""
        self.task_id = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with run_node(_settings()) as running:
            app, self.api_key = await running.create_app("schemathesis")
            created = await running.node.tasks.create(
                app,
                {
                    "name": "seed",
                    "schedule": {"kind": "delay", "delay_ms": 3_600_000},
                    "callback": {"url": "http://127.0.0.1:9/hook"},
                },
            )
            self.task_id = str(created.task.id)
            self.base_url = running.base_url
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> _NodeThread:
        self._thread.start()
        assert self._ready.wait(30), "node did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def served() -> Iterator[_NodeThread]:
    with _NodeThread() as node:
        yield node


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_never_break_the_server_or_the_schema(case: Any, served: _NodeThread) -> None:
    KEYS["app"] = served.api_key
    if case.path_parameters and "task_id" in case.path_parameters and case.path_parameters["task_id"] == "seed":
        case.path_parameters["task_id"] = served.task_id
    case.call_and_validate(base_url=served.base_url, checks=CHECKS, timeout=30)
