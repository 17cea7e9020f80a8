"""The console's task views an on-call engineer reads, served by one in-process node on the embedded store
(SQLite; no browser: tests/console has one browser test per view): each task's health in the list, a
task's whole history a page at a time, and a flow's request as sent and the answers that came back."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant, task_body
from tests.api.test_console_accounts import PASSWORD, page, sign_in
from tests.api.test_tenancy import wait_status
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module")
def api_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield {"urls": [f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('views') / 'data'}"], "topology": "1x2x4"}


def text_of(body: str) -> str:
    """The page's text, tags dropped and white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


async def signed_in(api_node: RunningNode, tenant: Tenant) -> str:
    status, session = await sign_in(api_node, key=tenant.api_key)
    assert status == 303 and session is not None
    return session


async def test_the_task_list_shows_each_tasks_last_result_success_rate_and_failures(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    path = "/views-health"
    receiver.script(path, Reply(200), Reply(200), Reply(200), Reply(410))
    task = await tenant.client.post(
        "/v1/tasks", json=task_body(name="sync-stock", callback={"url": receiver.url(path)})
    )
    task_id = task.json()["id"]
    for status in ("delivered", "delivered", "delivered", "dead"):
        flow = (await tenant.client.post(f"/v1/tasks/{task_id}/trigger")).json()
        await wait_status(tenant.client, flow["id"], status)
    await tenant.client.post("/v1/tasks", json=task_body(name="never-fired"))

    listed = await page(api_node, await signed_in(api_node, tenant), "/console/tasks")

    assert listed.status_code == 200
    rows = {text_of(row).split(" ")[0]: text_of(row) for row in re.findall(r"<tr>(.*?)</tr>", listed.text, re.S)}
    assert "✗ dead" in rows["sync-stock"] and "75.0 % delivered" in rows["sync-stock"]
    assert "1 failed" in rows["sync-stock"]
    assert "never fired" in rows["never-fired"] and "none finished" in rows["never-fired"]


async def test_a_tasks_page_pages_through_its_whole_history_older_and_newer(
    api_node: RunningNode, tenant: Tenant
) -> None:
    task_id = (await tenant.client.post("/v1/tasks", json=task_body())).json()["id"]
    ids = [(await tenant.client.post(f"/v1/tasks/{task_id}/trigger")).json()["id"] for _ in range(27)]
    session = await signed_in(api_node, tenant)

    def shown(body: str) -> list[str]:
        return re.findall(r'href="/console/flows/([0-9-]+)"', body)

    first = await page(api_node, session, f"/console/tasks/{task_id}")
    assert shown(first.text) == ids[:1:-1]  # the newest 25
    older_link = re.search(r'href="(/console/tasks/\d+\?before=\d+)"', first.text)
    assert older_link is not None and "?after=" not in first.text and "data-refresh" in first.text

    older = await page(api_node, session, html.unescape(older_link.group(1)))
    assert shown(older.text) == [ids[1], ids[0]] and "data-refresh" not in older.text
    assert 'rel="next"' not in older.text  # nothing older
    newer_link = re.search(r'href="(/console/tasks/\d+\?after=\d+)"', older.text)
    assert newer_link is not None
    newer = await page(api_node, session, html.unescape(newer_link.group(1)))
    assert shown(newer.text) == ids[:1:-1]  # the 25 just newer: back to the newest

    for query, field in (("before=yesterday", "before"), ("after=-1", "after"), ("before=1&after=2", "after")):
        refused = await page(api_node, session, f"/console/tasks/{task_id}?{query}")
        assert refused.status_code == 422 and field in text_of(refused.text), query


async def test_a_flows_page_shows_the_request_masked_and_each_answer_capped(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    # Given a task with a secret header and a secret payload key, whose receiver refused once, long
    path = "/views-answers"
    receiver.script(path, Reply(503, headers={"Set-Cookie": "sid=s3cret"}, body=b"e" * 6000), Reply(200, body=b"ok"))
    callback = {"url": receiver.url(path), "headers": {"x-api-key": "k3y-s3cret", "x-order": "o-7"}}
    body = task_body(callback=callback, payload={"order": 7, "password": "pa55"})
    task = (await tenant.client.post("/v1/tasks", json=body)).json()
    flow = (await tenant.client.post(f"/v1/tasks/{task['id']}/trigger")).json()
    await wait_status(tenant.client, flow["id"], "delivered")
    session = await signed_in(api_node, tenant)

    # When its page is opened
    shown = await page(api_node, session, f"/console/flows/{flow['id']}")

    # Then the request is there as sent, secrets masked, and both answers with the long one cut
    words = text_of(shown.text)
    assert shown.status_code == 200 and f"As sent: by the task's current version ({task['version']})" in words
    assert "x-order o-7" in words and "x-api-key [masked]" in words and "webhook-signature [masked]" in words
    assert '"password": "[masked]"' in words and '"order": 7' in words
    assert "Set-Cookie [masked]" in words
    for secret in ("k3y-s3cret", "pa55", "s3cret"):
        assert secret not in shown.text
    assert "Attempt 1: HTTP 503" in words and "Attempt 2: HTTP 200" in words
    assert "Truncated: the first 4,096 of 6,000 bytes read." in words and "e" * 4096 in shown.text
    assert "e" * 4097 not in shown.text

    # And once the task is edited, the page says the request shown is the new version's
    edited = await tenant.client.patch(f"/v1/tasks/{task['id']}", json={"payload": {"order": 8}})
    assert edited.status_code == 200
    again = text_of((await page(api_node, session, f"/console/flows/{flow['id']}")).text)
    assert f"version {task['version']} sent it; shown as the current version ({edited.json()['version']})" in again


async def test_a_tasks_page_masks_its_secret_headers_and_payload_keys_and_a_viewer_cannot_open_its_edit_form(
    api_node: RunningNode, tenant: Tenant, admin: httpx.AsyncClient
) -> None:
    # Given a task with a secret header and a secret payload key
    callback = {"url": "http://127.0.0.1:9/views-task", "headers": {"Authorization": "Bearer t0k3n", "x-order": "o-7"}}
    body = task_body(callback=callback, payload={"order": 7, "credentials": {"password": "pa55"}})
    task = (await tenant.client.post("/v1/tasks", json=body)).json()
    session = await signed_in(api_node, tenant)

    # When its page is opened
    shown = await page(api_node, session, f"/console/tasks/{task['id']}")

    # Then its callback and payload show as the flow page shows what was sent: secret values masked
    words = text_of(shown.text)
    assert shown.status_code == 200
    assert '"Authorization": "[masked]"' in words and '"x-order": "o-7"' in words
    assert '"credentials": "[masked]"' in words and '"order": 7' in words
    for secret in ("t0k3n", "pa55"):
        assert secret not in shown.text

    # And a viewer, who may change nothing, cannot read them in the edit form; an operator edits the real ones
    for role in ("viewer", "operator"):
        name = f"views-{role}-{tenant.app.id[-6:]}"
        made = await admin.post("/v1/users", json={"name": name, "password": PASSWORD, "roles": {tenant.app.id: role}})
        assert made.status_code == 201, made.text
        _, user_session = await sign_in(api_node, user=name, password=PASSWORD)
        assert user_session is not None
        form = await page(api_node, user_session, f"/console/tasks/{task['id']}/edit")
        assert form.status_code == (403 if role == "viewer" else 200), form.text[:300]
        assert ("t0k3n" in form.text) == (role == "operator")
        masked = await page(api_node, user_session, f"/console/tasks/{task['id']}")
        assert masked.status_code == 200 and "t0k3n" not in masked.text


async def test_a_tasks_page_links_its_children(api_node: RunningNode, tenant: Tenant) -> None:
    child = (await tenant.client.post("/v1/tasks", json=task_body(name="load"))).json()["id"]
    parent = await tenant.client.post("/v1/tasks", json=task_body(name="export", children={"on_success": [child]}))

    shown = await page(api_node, await signed_in(api_node, tenant), f"/console/tasks/{parent.json()['id']}")

    assert shown.status_code == 200
    assert f"Children on success {child} Children on failure none" in text_of(shown.text)
    assert f'href="/console/tasks/{child}"' in shown.text


async def test_a_childs_pages_link_its_parents_and_a_flows_page_links_the_flows_it_triggered_or_came_from(
    api_node: RunningNode, tenant: Tenant, receiver: Receiver
) -> None:
    # Given a parent whose delivered flow triggered its child's
    child = (await tenant.client.post("/v1/tasks", json=task_body(receiver, name="load"))).json()["id"]
    made = await tenant.client.post(
        "/v1/tasks", json=task_body(receiver, name="export", children={"on_success": [child]})
    )
    parent = made.json()["id"]
    flow = (await tenant.client.post(f"/v1/tasks/{parent}/trigger")).json()
    child_flow = f"{child}-{flow['scheduled_at_ms']}"
    await wait_status(tenant.client, child_flow, "delivered")
    session = await signed_in(api_node, tenant)

    # When the child's page and both flows' pages are opened
    task_page = await page(api_node, session, f"/console/tasks/{child}")
    parent_page = text_of((await page(api_node, session, f"/console/flows/{flow['id']}")).text)
    child_page = await page(api_node, session, f"/console/flows/{child_flow}")

    # Then each links the other
    assert f"Parents on success {parent} Parents on failure none" in text_of(task_page.text)
    assert f'href="/console/tasks/{parent}"' in task_page.text
    assert f"Child flows {child_flow}" in parent_page
    assert f"Triggered by {flow['id']}" in text_of(child_page.text)
    assert f'href="/console/flows/{flow["id"]}"' in child_page.text
