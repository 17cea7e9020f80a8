"""Hypothesis over the request models: any JSON in any field of a create, update or app request is
answered with a 2xx or a 4xx naming the field (never a 5xx), and what is accepted is stored as sent
(a payload, a name or a key never comes back altered, e.g. an integer as a float).

The node runs in a thread of its own (Hypothesis drives a synchronous client), on the in-memory twin.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import run_node
from tests.fuzz.cases import valid_task
from tjobs.settings import load_settings

ADMIN_KEY = "tja_fuzz_models_admin_0123456789"

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
SCALARS = st.none() | st.booleans() | INT64 | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
# integers past 64 bits and deep nests: what a JSON parser would otherwise turn into floats or refuse to write
HOSTILE = st.integers(min_value=1 << 64, max_value=1 << 80) | st.integers(
    max_value=-(1 << 63) - 1, min_value=-(1 << 80)
)
TASK_FIELDS = ["name", "key", "schedule", "callback", "payload", "misfire_policy", "delivery"]
SCHEDULE_FIELDS = [
    "kind",
    "delay_ms",
    "at",
    "at_ms",
    "expr",
    "timezone",
    "every_ms",
    "start_at",
    "end_at",
    "max_fires",
    "dst_gap",
    "dst_overlap",
]
CALLBACK_FIELDS = ["url", "urls", "method", "headers", "body", "timeout_ms", "max_attempts", "max_age_s"]
APP_FIELDS = [
    "name",
    "rate_limit_per_s",
    "max_concurrency",
    "allowed_callback_hosts",
    "callback_defaults",
    "max_active_tasks",
]


class NodeThread:
    """A node serving from its own event loop until stopped; ``key`` is an app's API key."""

    def __init__(self) -> None:
        self.base_url = ""
        self.key = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        config = load_settings(
            None,
            storage={"urls": ["memory://"], "topology": "1x2x4"},
            api={"admin_key": ADMIN_KEY},
            allow_loopback_callbacks=True,
            limits={"max_active_tasks_per_app": 0},
        )
        async with run_node(config) as running:
            _, self.key = await running.create_app("fuzz-models")
            self.base_url = running.base_url
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> NodeThread:
        self._thread.start()
        assert self._ready.wait(30), "node did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with (
        NodeThread() as node,
        httpx.Client(base_url=node.base_url, timeout=30, headers={"authorization": f"Bearer {node.key}"}) as made,
    ):
        yield made


def post(client: httpx.Client, path: str, body: Any, **headers: str) -> httpx.Response:
    return client.post(
        path,
        content=orjson.dumps(body, option=orjson.OPT_PASSTHROUGH_SUBCLASS),
        headers={"content-type": "application/json", **headers},
    )


def check_refusal(response: httpx.Response, *fields: str) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["code"] and error["message"]
        if response.status_code == 422:
            assert any((error.get("field") or "").startswith(f) for f in fields), (fields, error)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(field=st.sampled_from(TASK_FIELDS), value=JSON)
def test_any_value_in_any_task_field_is_a_2xx_or_a_4xx_naming_it(client: httpx.Client, field: str, value: Any) -> None:
    body = {**valid_task(), field: value}
    response = post(client, "/v1/tasks", body)
    check_refusal(response, field, "body")
    if response.status_code in (200, 201) and field in ("name", "key", "payload"):
        assert response.json()[field] == value  # stored as sent


@FUZZ
@given(field=st.sampled_from(SCHEDULE_FIELDS), value=JSON, kind=st.sampled_from(["delay", "at", "cron", "interval"]))
def test_any_value_in_any_schedule_field_is_a_2xx_or_a_4xx_naming_the_schedule(
    client: httpx.Client, field: str, value: Any, kind: str
) -> None:
    schedules: dict[str, dict[str, Any]] = {
        "delay": {"kind": "delay", "delay_ms": 60_000},
        "at": {"kind": "at", "at": "2030-01-01T00:00:00Z"},
        "cron": {"kind": "cron", "expr": "0 9 * * *"},
        "interval": {"kind": "interval", "every_ms": 60_000},
    }
    body = {**valid_task(), "schedule": {**schedules[kind], field: value}}
    check_refusal(post(client, "/v1/tasks", body), "schedule", "body")


@FUZZ
@given(field=st.sampled_from(CALLBACK_FIELDS), value=JSON)
def test_any_value_in_any_callback_field_is_a_2xx_or_a_4xx_naming_the_callback(
    client: httpx.Client, field: str, value: Any
) -> None:
    callback = {"url": "http://127.0.0.1:9/hook", field: value}
    if field == "urls":
        callback.pop("url")
    check_refusal(post(client, "/v1/tasks", {**valid_task(), "callback": callback}), "callback", "body")


@FUZZ
@given(payload=JSON)
def test_an_accepted_payload_comes_back_exactly_as_sent(client: httpx.Client, payload: Any) -> None:
    response = post(client, "/v1/tasks", {**valid_task(), "payload": payload})
    check_refusal(response, "payload")
    if response.status_code == 201:
        stored = client.get(f"/v1/tasks/{response.json()['id']}").json()["payload"]
        assert orjson.dumps(stored) == orjson.dumps(payload)


@FUZZ
@given(big=HOSTILE, where=st.sampled_from(["payload", "schedule.delay_ms", "callback.timeout_ms", "key"]))
def test_integers_beyond_64_bits_are_refused_naming_the_field(client: httpx.Client, big: int, where: str) -> None:
    body = valid_task()
    head, _, leaf = where.partition(".")
    if leaf:
        body[head][leaf] = "__BIG__"
    else:
        body[head] = "__BIG__"
    text = orjson.dumps(body).replace(b'"__BIG__"', str(big).encode())  # orjson itself cannot write it
    response = client.post("/v1/tasks", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == where


@FUZZ
@given(field=st.sampled_from(APP_FIELDS), value=JSON)
def test_any_value_in_any_app_field_is_a_2xx_or_a_4xx_naming_it(client: httpx.Client, field: str, value: Any) -> None:
    body = {"name": "fuzz", field: value}
    check_refusal(post(client, "/v1/apps", body, authorization=f"Bearer {ADMIN_KEY}"), field, "body")
