"""Callback targets over HTTP: bad hosts are 422s naming the field, refusals never show DNS answers,
and a batch names the refused target of a multicast item (``callback.urls[1]``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from aiohttp.abc import ResolveResult

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage, task_body
from tjobs.delivery.ssrf import TargetGuard

pytestmark = pytest.mark.asyncio(loop_scope="session")

PUBLIC_URL = "http://93.184.216.34/hook"
BAD_HOSTS = [
    "http://a..b/",
    "http://.example/",
    "http://" + "a" * 64 + ".com/",
    "http://" + ("a" * 60 + ".") * 5 + "com/",
    "http://\u05d0a.example/",
    "http://exa\x80mple.com/",
    "http://\ufffd.com/",
    "http://:@example.com/",
    "http://user:pw@example.com/",
    "http://16\U0001ccf9.254.169.254/",
    "http://127.1/",
    "http://[fe80::1%25lo]/",
    "http://example.com\\@10.0.0.1/",
    "http://xn--zz.example/",
]


async def _private_dns(host: str, port: int) -> list[ResolveResult]:
    address = {"intranet.example": "10.0.0.1", "meta.example": "169.254.169.254"}.get(host.rstrip("."), "93.184.216.34")
    return [{"hostname": host, "host": address, "port": port, "family": socket.AF_INET, "proto": 0, "flags": 0}]


@pytest.fixture
def private_dns(api_node: RunningNode) -> Iterator[None]:
    """The registration guard with a resolver that answers private addresses for two names."""
    tasks = api_node.node.tasks
    original = tasks.guard
    tasks.guard = TargetGuard(allow_loopback=original.allow_loopback, resolve=_private_dns)
    try:
        yield
    finally:
        tasks.guard = original


@pytest.mark.parametrize("url", BAD_HOSTS)
@refused_before_storage
async def test_a_bad_host_is_a_422_naming_the_field(tenant: Tenant, url: str) -> None:
    response = await tenant.client.post("/v1/tasks", json=task_body(callback={"url": url}))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "callback.url"
    multicast = await tenant.client.post("/v1/tasks", json=task_body(callback={"urls": [PUBLIC_URL, url]}))
    assert multicast.status_code == 422 and multicast.json()["error"]["field"] == "callback.urls[1]"


async def test_one_bad_host_fails_only_its_batch_item(tenant: Tenant) -> None:
    items = [task_body(name=f"bad-{i}", callback={"url": url}) for i, url in enumerate(BAD_HOSTS)]
    items.append(task_body(name="good", callback={"url": PUBLIC_URL}))
    response = await tenant.client.post("/v1/tasks/batch", json={"tasks": items})
    assert response.status_code == 200, response.text
    result = response.json()
    assert [i["status"] for i in result["items"]] == [422] * len(BAD_HOSTS) + [201]
    assert [i["error"]["field"] for i in result["items"][:-1]] == [
        f"tasks[{i}].callback.url" for i in range(len(BAD_HOSTS))
    ]


async def test_a_batch_names_the_refused_target_of_a_multicast_item(tenant: Tenant, private_dns: None) -> None:
    items = [
        task_body(name="second-refused", callback={"urls": [PUBLIC_URL, "http://10.0.0.1/hook"]}),
        task_body(name="first-refused", callback={"urls": ["http://intranet.example/", PUBLIC_URL]}),
        task_body(name="unicast-refused", callback={"url": "http://meta.example/"}),
        task_body(name="fine", callback={"urls": [PUBLIC_URL, "http://public.example/"]}),
    ]
    result = (await tenant.client.post("/v1/tasks/batch", json={"tasks": items})).json()
    assert [i["status"] for i in result["items"]] == [422, 422, 422, 201], result
    fields = [i["error"]["field"] for i in result["items"][:3]]
    assert fields == ["tasks[0].callback.urls[1]", "tasks[1].callback.urls[0]", "tasks[2].callback.url"]
    assert all(i["error"]["code"] == "target_refused" for i in result["items"][:3])


async def test_a_refusal_says_not_allowed_without_the_dns_answer(tenant: Tenant, private_dns: None) -> None:
    for url, answer in (("http://intranet.example/", "10.0.0.1"), ("http://meta.example./x", "169.254.169.254")):
        single = await tenant.client.post("/v1/tasks", json=task_body(callback={"url": url}))
        batch = await tenant.client.post("/v1/tasks/batch", json={"tasks": [task_body(callback={"url": url})]})
        for error in (single.json()["error"], batch.json()["items"][0]["error"]):
            assert error["code"] == "target_refused" and "not allowed" in error["message"], error
            assert answer not in error["message"] and "private" not in error["message"], error
