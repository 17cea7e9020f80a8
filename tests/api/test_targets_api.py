"""``/v1/targets``: an app's named targets through the API, on every storage backend.

Validation names the field of every refusal; another app's target is a 404; deleting a target tasks
still name is a 409 with how many; a stale ``version`` is a 409; and no answer or log line ever
carries a credential's value.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from typer.testing import CliRunner

from testkit import RunningNode, run_node
from testkit.sqlite_template import migrate_sqlite
from tests.api.conftest import ADMIN_KEY, Tenant, task_body
from tests.e2e.conftest import FAST_SETTINGS
from tjobs.cli.main import app as cli_app
from tjobs.client import AsyncClient, Conflict, VersionConflict, delay
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

ALLOWED = ["127.0.0.1:5672", "127.0.0.1:4222", "127.0.0.1:6379", "127.0.0.1:50051"]
SECRETS = ("pw-Zk2q9-never-shown", "tok-8f1c-never-shown", "Bearer hdr-51e0-never-shown")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api_node(api_storage: dict[str, Any]) -> AsyncIterator[RunningNode]:
    """The module's node allows brokers and a gRPC server on loopback (``targets.allowed_addresses``)."""
    settings = load_settings(
        None,
        storage=api_storage,
        api={"admin_key": ADMIN_KEY},
        targets={"allowed_addresses": ALLOWED},
        **FAST_SETTINGS,
    )
    if not api_storage["urls"][0].startswith("memory:"):
        await migrate_sqlite(settings.storage)
    async with run_node(settings) as handle:
        yield handle


def amqp(name: str = "orders-mq", **settings: Any) -> dict[str, Any]:
    return {
        "name": name,
        "protocol": "amqp",
        "settings": {"url": "amqp://127.0.0.1:5672/", "exchange": "orders", "routing_key": "fire", **settings},
        "retry": {"max_attempts": 4, "backoff_base_ms": 200},
        "credentials": {"username": "tjobs", "password": SECRETS[0]},
    }


BODIES: dict[str, dict[str, Any]] = {
    "amqp": amqp(),
    "nats": {
        "name": "orders-nats",
        "protocol": "nats",
        "settings": {"servers": ["nats://127.0.0.1:4222"], "subject": "orders.fire", "stream": "ORDERS"},
        "credentials": {"token": SECRETS[1]},
    },
    "redis_stream": {
        "name": "orders-stream",
        "protocol": "redis_stream",
        "settings": {"url": "redis://127.0.0.1:6379/0", "stream": "orders", "maxlen": 10_000},
        "credentials": {"password": SECRETS[0]},
    },
    "grpc": {
        "name": "orders-grpc",
        "protocol": "grpc",
        "settings": {"address": "127.0.0.1:50051", "deadline_ms": 800},
        "credentials": {"authorization": SECRETS[2]},
    },
    "http": {
        "name": "orders-http",
        "protocol": "http",
        "settings": {"urls": ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"], "method": "PUT", "timeout_ms": 900},
        "credentials": {"authorization": SECRETS[2]},
    },
}


class Answers:
    """Every answer body a test saw, to be searched for secrets."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.bodies: list[str] = []

    async def __call__(self, method: str, path: str, body: Any = None) -> httpx.Response:
        response = await self.client.request(method, path, json=body)
        self.bodies.append(response.text)
        return response


def capture_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Every record at DEBUG, with the third-party loggers at the levels a node sets them to
    (:func:`tjobs.observability.logs.configure_logging`: aiosqlite's debug lines quote SQL parameters)."""
    caplog.set_level(logging.DEBUG)
    for chatty in ("alembic", "aiosqlite", "asyncio"):
        caplog.set_level(logging.WARNING, logger=chatty)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text
        assert "never-shown" not in text


# ---- create, read, list ------------------------------------------------------------------------


async def test_targets_of_every_protocol_are_created_read_and_listed_with_credentials_as_keys_only(
    tenant: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    capture_logs(caplog)
    call = Answers(tenant.client)
    for protocol, body in BODIES.items():
        created = await call("POST", "/v1/targets", body)
        assert created.status_code == 201, created.text
        answer = created.json()
        assert answer["protocol"] == protocol and answer["version"] == 1 and answer["name"] == body["name"]
        assert answer["credentials"] == dict.fromkeys(body["credentials"], "***")
        assert (await call("GET", f"/v1/targets/{body['name']}")).json() == answer
    amqp_answer = (await call("GET", "/v1/targets/orders-mq")).json()
    assert amqp_answer["settings"] == {
        "url": "amqp://127.0.0.1:5672/",
        "exchange": "orders",
        "routing_key": "fire",
        "persistent": True,
        "mandatory": True,
    }
    assert amqp_answer["retry"] == {"max_attempts": 4, "backoff_base_ms": 200}

    listed = (await call("GET", "/v1/targets")).json()
    assert [t["name"] for t in listed["items"]] == sorted(b["name"] for b in BODIES.values())
    first = (await call("GET", "/v1/targets?limit=2")).json()
    rest = (await call("GET", f"/v1/targets?limit=10&cursor={first['next_cursor']}")).json()
    assert [t["name"] for t in first["items"] + rest["items"]] == [t["name"] for t in listed["items"]]
    assert rest["next_cursor"] is None

    again = await call("POST", "/v1/targets", BODIES["amqp"])
    assert again.status_code == 409 and again.json()["error"]["code"] == "target_exists"
    assert_no_secret(*call.bodies, caplog.text)


# ---- validation: every refusal names its field -------------------------------------------------


def _with(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``body`` with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    copy: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in body.items()}
    *parents, last = path.split(".")
    node = copy
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return copy


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("bad name", _with(amqp(), "name", "no spaces"), "name"),
    ("unknown protocol", _with(amqp(), "protocol", "kafka"), "protocol"),
    ("unknown key", _with(amqp(), "colour", "red"), "colour"),
    ("missing exchange", _with(amqp(), "settings.exchange", ...), "settings.exchange"),
    ("exchange not a string", _with(amqp(), "settings.exchange", 7), "settings.exchange"),
    ("wrong scheme", _with(amqp(), "settings.url", "http://127.0.0.1:5672/"), "settings.url"),
    ("user info", _with(amqp(), "settings.url", "amqp://u:p@127.0.0.1:5672/"), "settings.url"),
    ("broker not allowed", _with(amqp(), "settings.url", "amqp://127.0.0.1:5673/"), "settings.url"),
    ("not a setting", _with(amqp(), "settings.subject", "x"), "settings.subject"),
    ("persistent not a bool", _with(amqp(), "settings.persistent", "yes"), "settings.persistent"),
    ("retry bound", _with(amqp(), "retry.max_attempts", 0), "retry.max_attempts"),
    ("backoff order", _with(amqp(), "retry", {"backoff_base_ms": 500, "backoff_max_ms": 100}), "retry.backoff_max_ms"),
    ("credential key", _with(amqp(), "credentials", {"token": SECRETS[1]}), "credentials.token"),
    ("credential value", _with(amqp(), "credentials.password", SECRETS[0] + "\x01"), "credentials.password"),
    (
        "nats server",
        _with(BODIES["nats"], "settings.servers", ["nats://127.0.0.1:4222", "http://x:1"]),
        "settings.servers[1]",
    ),
    ("nats wildcard", _with(BODIES["nats"], "settings.subject", "orders.*"), "settings.subject"),
    (
        "nats token and user",
        _with(BODIES["nats"], "credentials", {"token": SECRETS[1], "username": "u"}),
        "credentials.token",
    ),
    ("grpc without port", _with(BODIES["grpc"], "settings.address", "127.0.0.1"), "settings.address"),
    ("grpc not allowed", _with(BODIES["grpc"], "settings.address", "10.0.0.9:50051"), "settings.address"),
    ("redis maxlen", _with(BODIES["redis_stream"], "settings.maxlen", 0), "settings.maxlen"),
    ("http GET", _with(BODIES["http"], "settings.method", "GET"), "settings.method"),
    ("http metadata", _with(BODIES["http"], "settings.urls", ["http://169.254.169.254/x"]), "settings.urls[0]"),
    ("http both", _with(BODIES["http"], "settings.url", "http://127.0.0.1:9/"), "settings.url"),
    (
        "http reserved header",
        _with(BODIES["http"], "settings.headers", {"webhook-id": "x"}),
        "settings.headers.webhook-id",
    ),
    (
        "http credential header",
        _with(BODIES["http"], "credentials", {"bad header": SECRETS[2]}),
        "credentials.bad header",
    ),
]


@pytest.mark.parametrize(("case", "body", "field"), INVALID, ids=[c[0] for c in INVALID])
async def test_an_invalid_target_is_a_4xx_naming_the_field_and_never_echoing_a_credential(
    tenant: Tenant, case: str, body: dict[str, Any], field: str, caplog: pytest.LogCaptureFixture
) -> None:
    capture_logs(caplog)
    answer = await tenant.client.post("/v1/targets", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field
    assert_no_secret(answer.text, caplog.text)
    assert (await tenant.client.get(f"/v1/targets/{body.get('name', 'x')}")).status_code == 404


# ---- tenancy -----------------------------------------------------------------------------------


async def test_an_app_never_sees_nor_changes_nor_names_another_apps_target(
    tenant_factory: Callable[..., Awaitable[Tenant]],
) -> None:
    a = await tenant_factory("targets-a")
    b = await tenant_factory("targets-b")
    assert (await a.client.post("/v1/targets", json=amqp())).status_code == 201

    assert (await b.client.get("/v1/targets/orders-mq")).status_code == 404
    assert (await b.client.patch("/v1/targets/orders-mq", json={"retry": {}})).status_code == 404
    assert (await b.client.delete("/v1/targets/orders-mq")).status_code == 404
    assert (await b.client.get("/v1/targets")).json()["items"] == []
    named = await b.client.post("/v1/tasks", json=task_body(callback={"target": "orders-mq"}))
    assert named.status_code == 422 and named.json()["error"]["field"] == "callback.target"
    assert (await a.client.get("/v1/targets/orders-mq")).json()["version"] == 1
    # the same name is free in B's namespace
    assert (await b.client.post("/v1/targets", json=amqp())).status_code == 201


# ---- versions ----------------------------------------------------------------------------------


async def test_an_update_with_a_stale_version_is_a_409_and_without_one_the_last_wins(tenant: Tenant) -> None:
    await tenant.client.post("/v1/targets", json=amqp())
    moved = await tenant.client.patch(
        "/v1/targets/orders-mq", json={"settings": {**amqp()["settings"], "exchange": "billing"}, "version": 1}
    )
    assert moved.status_code == 200 and moved.json()["version"] == 2
    assert moved.json()["settings"]["exchange"] == "billing"
    assert moved.json()["credentials"] == {"username": "***", "password": "***"}  # kept

    stale = await tenant.client.patch("/v1/targets/orders-mq", json={"retry": {"max_attempts": 9}, "version": 1})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "version_conflict"
    last = await tenant.client.patch("/v1/targets/orders-mq", json={"retry": {"max_attempts": 9}})
    assert last.json()["version"] == 3 and last.json()["retry"] == {"max_attempts": 9}

    cleared = await tenant.client.patch("/v1/targets/orders-mq", json={"credentials": {}})
    assert cleared.json()["credentials"] == {}
    protocol_only = await tenant.client.patch("/v1/targets/orders-mq", json={"protocol": "nats"})
    assert protocol_only.status_code == 422 and protocol_only.json()["error"]["field"] == "settings"
    switched = await tenant.client.patch(
        "/v1/targets/orders-mq", json={"protocol": "nats", "settings": BODIES["nats"]["settings"]}
    )
    assert switched.status_code == 200 and switched.json()["protocol"] == "nats"


async def test_an_update_naming_some_credentials_keeps_the_others_and_a_null_removes_one(
    tenant: Tenant, api_node: RunningNode
) -> None:
    """Credentials are write-only: a client cannot read the username back to send it with a new
    password, so an update merges the keys it names into the stored ones (a null removes a key; ``{}``
    clears them all, as documented)."""
    stored = api_node.node.store

    async def credentials_of(name: str) -> dict[str, str]:
        target = await stored.get_target(tenant.app.id, name)
        assert target is not None
        return dict(target.credentials)

    await tenant.client.post("/v1/targets", json=amqp("rotate-mq"))
    rotated = await tenant.client.patch("/v1/targets/rotate-mq", json={"credentials": {"password": "pw-rotated-1"}})
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["credentials"] == {"username": "***", "password": "***"}
    assert "pw-rotated-1" not in rotated.text and "tjobs" not in json.dumps(rotated.json()["credentials"])
    assert await credentials_of("rotate-mq") == {"username": "tjobs", "password": "pw-rotated-1"}

    # NATS: a token beside the stored username and password is refused, naming the key; nulls remove them
    nats = {**BODIES["nats"], "name": "rotate-nats", "credentials": {"username": "u", "password": SECRETS[0]}}
    assert (await tenant.client.post("/v1/targets", json=nats)).status_code == 201
    both = await tenant.client.patch("/v1/targets/rotate-nats", json={"credentials": {"token": SECRETS[1]}})
    assert both.status_code == 422 and both.json()["error"]["field"] == "credentials.token"
    assert SECRETS[1] not in both.text
    switched = await tenant.client.patch(
        "/v1/targets/rotate-nats", json={"credentials": {"token": SECRETS[1], "username": None, "password": None}}
    )
    assert switched.status_code == 200 and switched.json()["credentials"] == {"token": "***"}
    assert await credentials_of("rotate-nats") == {"token": SECRETS[1]}

    # a protocol change replaces them as a whole: the old protocol's keys never reach the new one
    to_http = await tenant.client.patch(
        "/v1/targets/rotate-mq",
        json={"protocol": "http", "settings": BODIES["http"]["settings"], "credentials": {"authorization": "Bearer x"}},
    )
    assert to_http.status_code == 200 and to_http.json()["credentials"] == {"authorization": "***"}


async def test_a_change_to_http_never_sends_the_old_protocols_credentials_as_headers(tenant: Tenant) -> None:
    """An HTTP target sends its credentials as headers, and any name makes a header: kept AMQP
    credentials would go to the new URL as ``username:`` and ``password:`` headers. Refused, naming
    the field, until the update gives the HTTP target's own (or ``{}``)."""
    await tenant.client.post("/v1/targets", json=amqp("leaving-mq"))
    change = {"protocol": "http", "settings": BODIES["http"]["settings"]}
    kept = await tenant.client.patch("/v1/targets/leaving-mq", json=change)
    assert kept.status_code == 422 and kept.json()["error"]["field"] == "credentials", kept.text
    assert SECRETS[0] not in kept.text
    cleared = await tenant.client.patch("/v1/targets/leaving-mq", json={**change, "credentials": {}})
    assert cleared.status_code == 200 and cleared.json()["credentials"] == {}


# ---- tasks naming targets, and deleting a target they name --------------------------------------


async def test_tasks_name_targets_and_a_target_they_name_cannot_be_deleted_until_they_are_gone(
    tenant: Tenant,
) -> None:
    client = tenant.client
    await client.post("/v1/targets", json=amqp())
    await client.post("/v1/targets", json=BODIES["nats"])

    unicast = await client.post("/v1/tasks", json=task_body(callback={"target": "orders-mq", "max_attempts": 2}))
    assert unicast.status_code == 201, unicast.text
    assert unicast.json()["callback"] == {"method": "POST", "max_attempts": 2, "targets": ["orders-mq"]}
    multicast = await client.post("/v1/tasks", json=task_body(callback={"targets": ["orders-nats", "orders-mq"]}))
    assert multicast.status_code == 201, multicast.text
    batch = await client.post(
        "/v1/tasks/batch",
        json={"tasks": [task_body(callback={"target": "missing"}), task_body(callback={"target": "orders-nats"})]},
    )
    items = batch.json()["items"]
    assert items[0]["error"]["field"] == "tasks[0].callback.target" and items[1]["status"] == 201

    for callback, field in (
        ({"target": "missing"}, "callback.target"),
        ({"targets": ["orders-mq", "missing"]}, "callback.targets[1]"),
        ({"target": "orders-mq", "url": "http://127.0.0.1:9/"}, "callback.url"),
        ({"target": "orders-mq", "method": "PUT"}, "callback.method"),
        ({"target": "orders-mq", "targets": ["orders-nats"]}, "callback.target"),
        ({"targets": ["orders-mq", "orders-mq"]}, "callback.targets"),
        ({"target": "bad name"}, "callback.target"),
    ):
        refused = await client.post("/v1/tasks", json=task_body(callback=callback))
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field, (callback, refused.text)

    in_use = await client.delete("/v1/targets/orders-mq")
    assert in_use.status_code == 409
    assert in_use.json()["error"]["code"] == "target_in_use" and in_use.json()["error"]["details"] == {"tasks": 2}
    nats_in_use = await client.delete("/v1/targets/orders-nats")
    assert nats_in_use.json()["error"]["details"] == {"tasks": 2}

    # moving a task to an inline URL, and deleting the other, frees the target
    moved = await client.patch(
        f"/v1/tasks/{unicast.json()['id']}", json={"callback": {"url": "http://127.0.0.1:9/hook"}}
    )
    assert moved.status_code == 200 and "targets" not in moved.json()["callback"]
    assert (await client.delete("/v1/targets/orders-mq")).json()["error"]["details"] == {"tasks": 1}
    assert (await client.delete(f"/v1/tasks/{multicast.json()['id']}")).status_code == 204
    assert (await client.delete("/v1/targets/orders-mq")).status_code == 204
    assert (await client.get("/v1/targets/orders-mq")).status_code == 404
    assert (await client.delete("/v1/targets/orders-mq")).status_code == 404


async def test_run_on_publish_takes_one_broker_target_and_refuses_anything_else_naming_the_field(
    tenant: Tenant,
) -> None:
    """A task whose broker's acknowledgement starts a run (docs/targets.md "Runs from a broker")."""
    client = tenant.client
    await client.post("/v1/targets", json=amqp("runs-mq"))
    await client.post("/v1/targets", json={**BODIES["http"], "name": "runs-http"})

    made = await client.post(
        "/v1/tasks", json=task_body(callback={"target": "runs-mq", "run_on_publish": True, "run_timeout_ms": 60_000})
    )
    assert made.status_code == 201, made.text
    assert made.json()["callback"] == {
        "method": "POST",
        "targets": ["runs-mq"],
        "run_timeout_ms": 60_000,
        "run_on_publish": True,
    }
    plain = await client.post("/v1/tasks", json=task_body(callback={"target": "runs-mq", "run_on_publish": False}))
    assert plain.status_code == 201 and "run_on_publish" not in plain.json()["callback"]

    for callback, code in (
        ({"target": "runs-http", "run_on_publish": True}, "broker_run"),
        ({"targets": ["runs-mq", "runs-http"], "run_on_publish": True}, "broker_run"),
        ({"url": "http://127.0.0.1:9/hook", "run_on_publish": True}, "broker_run"),
        ({"pool": "workers", "run_on_publish": True}, "broker_run"),
        ({"target": "runs-mq", "run_on_publish": "yes"}, None),
    ):
        refused = await client.post("/v1/tasks", json=task_body(callback=callback))
        error = refused.json()["error"]
        assert refused.status_code == 422 and error["field"] == "callback.run_on_publish", (callback, refused.text)
        assert code is None or error["code"] == code, (callback, error)

    moved = await client.patch(
        f"/v1/tasks/{plain.json()['id']}", json={"callback": {"target": "runs-http", "run_on_publish": True}}
    )
    assert moved.status_code == 422 and moved.json()["error"]["field"] == "callback.run_on_publish"
    batch = await client.post(
        "/v1/tasks/batch",
        json={
            "tasks": [
                task_body(callback={"target": "runs-http"}),
                task_body(callback={"target": "runs-http", "run_on_publish": True}),
            ]
        },
    )
    items = batch.json()["items"]
    assert items[0]["status"] == 201 and items[1]["error"]["field"] == "tasks[1].callback.run_on_publish"


# ---- the SDK and the CLI -----------------------------------------------------------------------


async def test_the_sdk_manages_targets_and_reads_the_in_use_count(api_node: RunningNode, tenant: Tenant) -> None:
    async with AsyncClient(api_node.base_url, tenant.api_key) as sdk:
        body = BODIES["redis_stream"]
        made = await sdk.create_target(
            body["name"], "redis_stream", body["settings"], retry={"max_attempts": 3}, credentials=body["credentials"]
        )
        assert made.credentials == {"password": "***"} and made.retry == {"max_attempts": 3}
        assert (await sdk.get_target(made.name)).version == 1
        assert [t.name for t in (await sdk.list_targets()).items] == [made.name]
        changed = await sdk.update_target(made.name, version=1, retry={"max_attempts": 5})
        assert (changed.version, changed.retry) == (2, {"max_attempts": 5})
        with pytest.raises(VersionConflict):
            await sdk.update_target(made.name, version=1, retry={})
        await sdk.create_task("names-it", delay(hours=1), callback={"target": made.name})
        with pytest.raises(Conflict) as in_use:
            await sdk.delete_target(made.name)
        assert in_use.value.code == "target_in_use" and in_use.value.details == {"tasks": 1}


async def test_the_cli_manages_targets_without_ever_printing_a_credential(
    api_node: RunningNode, tenant: Tenant, tmp_path: Path
) -> None:
    env = {"TJOBS_URL": api_node.base_url, "TJOBS_API_KEY": tenant.api_key, "COLUMNS": "200"}

    async def cli(*args: str, code: int = 0) -> str:
        """The command's stdout (its stderr only on failure: a log line may land there too)."""
        result = await asyncio.to_thread(CliRunner().invoke, cli_app, list(args), env=env)
        assert result.exit_code == code, result.output
        assert_no_secret(result.output)
        return result.stdout if code == 0 else result.output

    secrets_file = tmp_path / "credentials.json"
    secrets_file.write_text(json.dumps({"username": "tjobs", "password": SECRETS[0]}))
    settings = json.dumps(BODIES["amqp"]["settings"])
    made = json.loads(
        await cli("target", "create", "cli-mq", "--protocol", "amqp", "--settings", settings,
                  "--credentials-file", str(secrets_file), "--retry", '{"max_attempts": 2}', "--json")
    )  # fmt: skip
    assert made["credentials"] == {"username": "***", "password": "***"}
    assert "cli-mq" in await cli("target", "list")
    assert json.loads(await cli("target", "get", "cli-mq", "--json"))["retry"] == {"max_attempts": 2}
    updated = json.loads(
        await cli("target", "update", "cli-mq", "--credential", f"password={SECRETS[0]}x", "--version", "1", "--json")
    )
    assert updated["version"] == 2 and updated["credentials"] == {"username": "***", "password": "***"}  # merged
    removed = json.loads(await cli("target", "update", "cli-mq", "--remove-credential", "username", "--json"))
    assert removed["version"] == 3 and removed["credentials"] == {"password": "***"}
    task = json.loads(await cli("task", "create", "cli-named", "--target", "cli-mq", "--delay", "1h", "--json"))
    assert task["callback"]["targets"] == ["cli-mq"]
    assert "target_in_use" in await cli("target", "delete", "cli-mq", code=1)
    await cli("task", "delete", task["id"])
    await cli("target", "delete", "cli-mq")
    assert "not_found" in await cli("target", "get", "cli-mq", code=1)
