"""``/v1/alerts``: rules and channels per app (and global for the admin), bad input named, what fires listed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from testkit import RunningNode
from tests.api.conftest import Tenant, refused_before_storage
from tjobs.cli.main import app as cli
from tjobs.model import SloCounts, SloMinute

pytestmark = pytest.mark.asyncio(loop_scope="session")
OWN_API_NODE = True  # a test stops the node's alert evaluator (conftest.py)

RULE = {"name": "dlq", "kind": "dead_letters", "params": {"threshold": 2, "window_minutes": 5}}

BAD_RULES: list[tuple[Any, str]] = [
    ([], "body"),
    ({"kind": "dead_letters", "params": {"threshold": 1}}, "name"),
    ({**RULE, "name": "no spaces"}, "name"),
    ({**RULE, "kind": "weather"}, "kind"),
    ({**RULE, "params": {"threshold": "many"}}, "params.threshold"),
    ({**RULE, "params": {"threshold": 1, "window_minutes": 0}}, "params.window_minutes"),
    ({**RULE, "params": {"threshold": 1, "colour": "red"}}, "params.colour"),
    ({**RULE, "channels": ["chan_0000000000000000"]}, "channels[0]"),
    ({**RULE, "channels": "all"}, "channels"),
    ({**RULE, "repeat_s": 1.5}, "repeat_s"),
    ({**RULE, "enabled": 1}, "enabled"),
    ({**RULE, "surprise": 1}, "surprise"),
    ({"name": "n", "kind": "node_down"}, "kind"),  # global rules are the admin's
    ({"name": "p", "kind": "pool_executors", "params": {"pool": "UPPER"}}, "params.pool"),
]

BAD_CHANNELS: list[tuple[Any, str]] = [
    ("text", "body"),
    ({"kind": "slack", "settings": {"url": "https://example.com/x"}}, "name"),
    ({"name": "c", "kind": "pager", "settings": {}}, "kind"),
    ({"name": "c", "kind": "slack"}, "settings"),
    ({"name": "c", "kind": "slack", "settings": {"url": "ftp://example.com/x"}}, "settings.url"),
    ({"name": "c", "kind": "slack", "settings": {"url": 7}}, "settings.url"),
    ({"name": "c", "kind": "slack", "settings": {"url": "http://10.0.0.1/x"}}, "settings.url"),  # SSRF
    ({"name": "c", "kind": "slack", "settings": {"url": "http://169.254.169.254/x"}}, "settings.url"),
    (
        {"name": "c", "kind": "webhook", "settings": {"url": "https://example.com/x", "secret": "plain"}},
        "settings.secret",
    ),
    ({"name": "c", "kind": "email", "settings": {"to": ["not-an-address"]}}, "settings.to"),
    ({"name": "c", "kind": "email", "settings": {"to": []}}, "settings.to"),
    ({"name": "c", "kind": "email", "settings": {"to": ["a@b.c"], "url": "x"}}, "settings.url"),
]


@pytest.mark.parametrize(("body", "field"), BAD_RULES, ids=[f"{i}-{case[1]}" for i, case in enumerate(BAD_RULES)])
@refused_before_storage
async def test_a_bad_rule_is_a_422_naming_the_field(tenant: Tenant, body: Any, field: str) -> None:
    response = await tenant.client.post("/v1/alerts/rules", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


@pytest.mark.parametrize(("body", "field"), BAD_CHANNELS, ids=[f"{i}-{case[1]}" for i, case in enumerate(BAD_CHANNELS)])
@refused_before_storage
async def test_a_bad_channel_is_a_422_naming_the_field(tenant: Tenant, body: Any, field: str) -> None:
    response = await tenant.client.post("/v1/alerts/channels", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


async def test_an_app_manages_its_own_and_the_admin_sees_every_one(
    tenant_factory: Any, admin: httpx.AsyncClient
) -> None:
    mine, theirs = await tenant_factory("mine"), await tenant_factory("theirs")
    made = await mine.client.post(
        "/v1/alerts/channels", json={"name": "hook", "kind": "webhook", "settings": {"url": "https://example.com/h"}}
    )
    assert made.status_code == 201, made.text
    channel = made.json()
    assert channel["settings"]["secret"].startswith("whsec_")  # shown once
    shown = (await mine.client.get(f"/v1/alerts/channels/{channel['id']}")).json()
    assert shown["settings"]["secret"] == "***"

    rule = (await mine.client.post("/v1/alerts/rules", json={**RULE, "channels": [channel["id"]]})).json()
    assert rule["app_id"] == mine.app.id and rule["channels"] == [channel["id"]] and rule["repeat_s"] == 3600
    assert (await theirs.client.get(f"/v1/alerts/rules/{rule['id']}")).status_code == 404
    assert (await theirs.client.get("/v1/alerts/rules")).json()["items"] == []
    refused = await theirs.client.post("/v1/alerts/rules", json={**RULE, "channels": [channel["id"]]})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "channels[0]"
    assert rule["id"] in {r["id"] for r in (await admin.get("/v1/alerts/rules")).json()["items"]}

    changed = await mine.client.patch(f"/v1/alerts/rules/{rule['id']}", json={"repeat_s": 0, "enabled": False})
    assert changed.status_code == 200 and changed.json()["repeat_s"] == 0 and changed.json()["params"] == RULE["params"]
    kept = await mine.client.patch(f"/v1/alerts/channels/{channel['id']}", json={"name": "hook2"})
    assert kept.json()["settings"]["secret"] == "***"
    in_use = await mine.client.delete(f"/v1/alerts/channels/{channel['id']}")
    assert in_use.status_code == 409
    assert (await mine.client.delete(f"/v1/alerts/rules/{rule['id']}")).status_code == 204
    assert (await mine.client.delete(f"/v1/alerts/channels/{channel['id']}")).status_code == 204
    assert (await mine.client.get(f"/v1/alerts/rules/{rule['id']}")).status_code == 404


async def test_the_admin_keeps_the_cluster_rules(admin: httpx.AsyncClient, tenant: Tenant) -> None:
    made = await admin.post("/v1/alerts/rules", json={"name": "nodes", "kind": "node_down", "params": {"min_nodes": 1}})
    assert made.status_code == 201, made.text
    assert made.json()["app_id"] is None
    assert (await tenant.client.get(f"/v1/alerts/rules/{made.json()['id']}")).status_code == 404
    assert (await admin.delete(f"/v1/alerts/rules/{made.json()['id']}")).status_code == 204


async def test_what_fires_is_listed_for_its_app_only(api_node: RunningNode, tenant_factory: Any) -> None:
    mine, theirs = await tenant_factory("firing"), await tenant_factory("quiet")
    rule = (await mine.client.post("/v1/alerts/rules", json=RULE)).json()
    await api_node.node.alerts.evaluator.stop()  # the node's own pass (at the real time) stays out of it
    now_ms = api_node.node.clock.now_ms()
    await api_node.node.store.add_slo_minutes("n-test", [SloMinute(mine.app.id, now_ms // 60_000, SloCounts(dead=3))])
    await api_node.node.alerts.evaluator.evaluate(now_ms)

    (alert,) = (await mine.client.get("/v1/alerts/active")).json()["items"]
    assert alert["rule_id"] == rule["id"] and alert["status"] == "firing" and alert["subject"] == "dead_letters"
    assert alert["details"] == {"dead": 3} and "3 dead letters" in alert["summary"]
    assert (await theirs.client.get("/v1/alerts/active")).json()["items"] == []
    await mine.client.patch(f"/v1/alerts/rules/{rule['id']}", json={"enabled": False})
    assert (await mine.client.get("/v1/alerts/active")).json()["items"] == []  # not evaluated: says nothing
    await mine.client.patch(f"/v1/alerts/rules/{rule['id']}", json={"enabled": True})

    await api_node.node.alerts.evaluator.evaluate(now_ms + 10 * 60_000)  # the window moved past them
    assert (await mine.client.get("/v1/alerts/active")).json()["items"] == []
    (resolved,) = (await mine.client.get("/v1/alerts/active", params={"resolved": "true"})).json()["items"]
    assert resolved["status"] == "resolved" and resolved["resolved_at"] is not None


async def test_an_unknown_id_is_a_404(tenant: Tenant) -> None:
    for path in ("/v1/alerts/rules/rule_0000000000000000", "/v1/alerts/channels/nope"):
        response = await tenant.client.get(path)
        assert response.status_code == 404, path


async def test_the_cli_manages_rules_and_channels(api_node: RunningNode, tenant: Tenant) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}

    async def run(*args: str, code: int = 0) -> str:
        result = await asyncio.to_thread(CliRunner().invoke, cli, ["alerts", *args], env=env)
        assert result.exit_code == code, result.output
        return result.output

    channel = json.loads(await run("channel-add", "ops", "--kind", "email", "--setting", "to=a@x.test,b@x.test"))
    assert channel["settings"] == {"to": ["a@x.test", "b@x.test"]}
    made = await run("rule-add", "dlq", "--kind", "dead_letters", "-p", "threshold=10", "-c", channel["id"], "--json")
    rule = json.loads(made)
    assert rule["params"] == {"threshold": 10, "window_minutes": 5} and rule["channels"] == [channel["id"]]
    assert "dlq" in await run("rules") and "a@x.test" in await run("channels")
    refused = await run("rule-add", "bad", "--kind", "dead_letters", "-p", "threshold=0", code=1)
    assert "params.threshold" in refused
    assert json.loads(await run("active", "--json")) == []
    await run("rule-rm", rule["id"])
    await run("channel-rm", channel["id"])
    assert json.loads(await run("rules", "--json")) == []
