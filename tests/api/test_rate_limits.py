"""API rate limits: per-app request, expensive-read and create buckets, and the shared budget of
requests without a valid key. Every refusal is 429 with ``Retry-After`` and a JSON error; one app's
limits never refuse another app.

Admission does not depend on the store, so these run on the memory twin (one node per test, small
buckets so a few requests exhaust them). The limiter's clock stands still unless a test moves it
(``LIMITER_TIME``), so no bucket refills while a slow machine sends the requests.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit import RunningNode, run_node
from tests.api.conftest import task_body
from tjobs.settings import load_settings

pytestmark = pytest.mark.asyncio

ADMIN_KEY = "tja_rate_limit_admin_key"


async def nothing_to_receive() -> MutableMapping[str, Any]:
    raise AssertionError("the admission layer never reads the request body")


@asynccontextmanager
async def node_with(**rate_limits: Any) -> AsyncIterator[RunningNode]:
    settings = load_settings(
        None,
        storage={"urls": ["memory://"], "topology": "1x1x4"},
        api={"admin_key": ADMIN_KEY},
        rate_limits={"burst_s": 1.0, **rate_limits},
        allow_loopback_callbacks=True,
    )
    async with run_node(settings) as running:
        running.api.state.rate_limits.monotonic = LIMITER_TIME
        yield running


class StillTime:
    """The limiter's monotonic seconds: still until :meth:`advance`."""

    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


LIMITER_TIME = StillTime()


@asynccontextmanager
async def client_of(running: RunningNode, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.base_url, headers={"authorization": f"Bearer {key}"}) as client:
        yield client


def assert_rate_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) >= 1, retry_after
    error = response.json()["error"]
    assert error["code"] == "rate_limited" and error["message"], error


async def test_an_app_over_its_request_rate_gets_429_and_another_app_is_unaffected() -> None:
    async with node_with(app_requests_per_s=5) as running:
        noisy_app, noisy_key = await running.create_app("noisy")
        _, quiet_key = await running.create_app("quiet")
        async with client_of(running, noisy_key) as noisy, client_of(running, quiet_key) as quiet:
            # Given: the noisy app spends its 5 tokens
            answers = [await noisy.get("/v1/app") for _ in range(5)]
            assert [a.status_code for a in answers] == [200] * 5
            # When: it asks once more
            refused = await noisy.get("/v1/app")
            # Then: 429 with Retry-After and a JSON error, while the quiet app gets all of its own
            assert_rate_limited(refused)
            assert [(await quiet.get("/v1/app")).status_code for _ in range(4)] == [200] * 4
            created = await quiet.post("/v1/tasks", json=task_body())
            assert created.status_code == 201, created.text
            # and the refusal is counted for the operator, per app and bucket
            async with httpx.AsyncClient(base_url=running.base_url) as scraper:  # an app key is charged anywhere
                scraped = (await scraper.get("/metrics")).text
            refusals = {
                (s.labels["app"], s.labels["bucket"]): s.value
                for family in text_string_to_metric_families(scraped)
                if family.name == "tjobs_api_rate_limited"
                for s in family.samples
                if s.name.endswith("_total")
            }
            assert refusals == {(noisy_app.id, "requests"): 1.0}


async def test_expensive_reads_have_their_own_bucket() -> None:
    async with node_with(app_requests_per_s=1000, app_expensive_reads_per_s=2) as running:
        _, key = await running.create_app("reader")
        _, other_key = await running.create_app("other")
        async with client_of(running, key) as client, client_of(running, other_key) as other:
            assert (await client.get("/v1/stats")).status_code == 200
            assert (await client.get("/v1/tasks")).status_code == 200
            assert_rate_limited(await client.get("/v1/dead-letters"))
            assert_rate_limited(await client.get("/v1/stats"))
            # cheap requests of the same app, and another app's expensive reads, still pass
            assert (await client.get("/v1/app")).status_code == 200
            assert (await client.post("/v1/tasks", json=task_body())).status_code == 201
            assert (await other.get("/v1/stats")).status_code == 200


async def test_searches_and_cluster_service_levels_are_expensive_reads() -> None:
    """The cross-shard flow search, a task search with filters and the cluster's service levels
    (``/v1/slo?window=``: every node's minutes summed from the store) spend the expensive-read bucket;
    ``/v1/slo`` without a window (this node's own figures, from memory) does not. Two expensive tokens,
    the next due 50 s later: no refill during the test, however slow the machine."""
    async with node_with(app_requests_per_s=1000, app_expensive_reads_per_s=0.02, burst_s=100) as running:
        _, key = await running.create_app("searcher")
        async with client_of(running, key) as client:
            assert (await client.get("/v1/flows", params={"status": "dead"})).status_code == 200
            assert (await client.get("/v1/slo", params={"window": "7d"})).status_code == 200
            assert_rate_limited(await client.get("/v1/flows"))
            assert_rate_limited(await client.get("/v1/slo", params={"window": "5m"}))
            assert_rate_limited(await client.get("/v1/tasks", params={"name_prefix": "a", "kind": "cron"}))
            assert (await client.get("/v1/slo")).status_code == 200


async def test_expensive_reads_are_named_by_method_route_and_query() -> None:
    from tjobs.api.ratelimit import is_expensive_read

    assert is_expensive_read("GET", "/v1/flows", ())
    assert is_expensive_read("GET", "/v1/tasks", ("name_prefix", "status"))
    assert is_expensive_read("GET", "/v1/slo", ("window",))
    assert not is_expensive_read("GET", "/v1/slo", ())
    assert not is_expensive_read("GET", "/v1/slo", ("app_id",))
    assert not is_expensive_read("POST", "/v1/tasks", ())
    assert not is_expensive_read("GET", "/v1/flows/{flow_id}", ())


async def test_an_apps_own_api_rate_overrides_the_node_default() -> None:
    async with node_with(app_requests_per_s=2) as running:
        async with client_of(running, ADMIN_KEY) as admin:
            made = await admin.post("/v1/apps", json={"name": "big", "api_rate_limit_per_s": 50})
            assert made.status_code == 201, made.text
            assert made.json()["settings"]["api_rate_limit_per_s"] == 50
            bad = await admin.post("/v1/apps", json={"name": "bad", "api_rate_limit_per_s": 0})
            assert bad.status_code == 422 and bad.json()["error"]["field"] == "api_rate_limit_per_s"
        async with client_of(running, made.json()["api_key"]) as client:
            assert [(await client.get("/v1/app")).status_code for _ in range(20)] == [200] * 20
            # lowering it takes effect (the node's app cache is refreshed by the admin's update)
            async with client_of(running, ADMIN_KEY) as admin:
                patched = await admin.patch(f"/v1/apps/{made.json()['id']}", json={"api_rate_limit_per_s": 1})
                assert patched.status_code == 200, patched.text
            statuses = []
            for _ in range(60):  # up to the first refusal: a connection refused again is held (at most 1 s)
                statuses.append((await client.get("/v1/app")).status_code)
                if statuses[-1] == 429:
                    break
            # at 1/s the bucket holds one request; at the old 50/s some 30 more would have been admitted
            assert 429 in statuses[:2], statuses


async def test_task_creates_spend_the_apps_create_rate_a_batch_counting_each_task() -> None:
    async with node_with(app_creates_per_s=3) as running:
        _, key = await running.create_app("writer")
        _, other_key = await running.create_app("other-writer")
        async with client_of(running, key) as client, client_of(running, other_key) as other:
            batch = await client.post("/v1/tasks/batch", json={"tasks": [task_body(name=f"b{i}") for i in range(2)]})
            assert batch.status_code == 200 and batch.json()["created"] == 2, batch.text
            assert (await client.post("/v1/tasks", json=task_body())).status_code == 201
            refused = await client.post("/v1/tasks", json=task_body())
            assert_rate_limited(refused)
            assert "registrations" in refused.json()["error"]["message"]
            assert_rate_limited(await client.post("/v1/tasks/batch", json={"tasks": [task_body()]}))
            # reads are not creates, and another app registers undisturbed
            assert (await client.get("/v1/app")).status_code == 200
            assert (await other.post("/v1/tasks", json=task_body())).status_code == 201


async def test_a_batch_larger_than_the_bucket_is_admitted_when_it_is_full_and_leaves_it_in_debt() -> None:
    async with node_with(app_creates_per_s=2) as running:
        _, key = await running.create_app("bulk")
        async with client_of(running, key) as client:
            batch = await client.post("/v1/tasks/batch", json={"tasks": [task_body(name=f"b{i}") for i in range(4)]})
            assert batch.status_code == 200 and batch.json()["created"] == 4, batch.text
            refused = await client.post("/v1/tasks", json=task_body())
            assert_rate_limited(refused)
            assert int(refused.headers["retry-after"]) >= 1


async def test_random_unknown_keys_cost_at_most_the_unauthenticated_budget_of_lookups() -> None:
    async with node_with(unauthenticated_per_s=5) as running:
        _, key = await running.create_app("legit")
        store = running.node.store
        lookups = 0
        find = store.find_app_by_key_hash

        async def counted(api_key_hash: str) -> Any:
            nonlocal lookups
            lookups += 1
            return await find(api_key_hash)

        store.find_app_by_key_hash = counted  # type: ignore[method-assign]
        async with client_of(running, key) as legit:
            assert (await legit.get("/v1/app")).status_code == 200  # this node has now seen the key
            lookups = 0
            # When: 100 requests, each with a fresh random key
            async with httpx.AsyncClient(base_url=running.base_url) as anyone:
                answers = await asyncio.gather(
                    *(
                        anyone.get("/v1/app", headers={"authorization": f"Bearer tjk_{secrets.token_urlsafe(32)}"})
                        for _ in range(100)
                    )
                )
            # Then: at most the budget (5 tokens, a little refill while they run) reached the store,
            # the rest were refused with 429 + Retry-After, and the app with a valid key is not refused
            statuses = [a.status_code for a in answers]
            assert set(statuses) <= {401, 429}
            assert lookups <= 8, lookups
            assert statuses.count(429) >= 90
            for answer in answers:
                if answer.status_code == 429:
                    assert_rate_limited(answer)
            assert (await legit.get("/v1/app")).status_code == 200


async def test_a_refused_key_is_refused_again_without_a_lookup() -> None:
    async with node_with(unauthenticated_per_s=1000) as running:
        store = running.node.store
        lookups = 0
        find = store.find_app_by_key_hash

        async def counted(api_key_hash: str) -> Any:
            nonlocal lookups
            lookups += 1
            return await find(api_key_hash)

        store.find_app_by_key_hash = counted  # type: ignore[method-assign]
        async with client_of(running, "tjk_" + "x" * 43) as stranger:
            statuses = [(await stranger.get("/v1/app")).status_code for _ in range(20)]
        assert statuses == [401] * 20
        assert lookups == 1


async def test_requests_without_a_key_spend_the_shared_budget() -> None:
    async with node_with(unauthenticated_per_s=3) as running:
        _, key = await running.create_app("legit")
        async with httpx.AsyncClient(base_url=running.base_url) as anyone, client_of(running, key) as legit:
            statuses = [(await anyone.get("/v1/app")).status_code for _ in range(3)]
            assert statuses == [401] * 3
            assert_rate_limited(await anyone.get("/v1/app"))
            assert_rate_limited(await anyone.get("/v1/apps/x", headers={"authorization": "Bearer wrong"}))
            # a valid key seen for the first time costs a token it gets back: with the budget spent it
            # waits for a refill, then it is admitted and the budget is unchanged by it
            LIMITER_TIME.advance(0.4)
            assert (await legit.get("/v1/app")).status_code == 200
            assert (await legit.get("/v1/app")).status_code == 200


def from_address(running: RunningNode, address: str, key: str | None = None) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (one of the loopback's 127.0.0.0/8): the source
    address the node sees, no forwarded header involved."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=running.base_url, headers=headers, transport=transport)


async def test_wrong_keys_from_one_address_do_not_lock_out_the_apps_of_another() -> None:
    async with node_with(unauthenticated_per_s=3) as running:
        _, seen_key = await running.create_app("seen-from-a")
        _, new_key = await running.create_app("new-from-b")
        _, new_on_a = await running.create_app("new-from-a")
        async with from_address(running, "127.0.0.2", seen_key) as legit_on_a:
            assert (await legit_on_a.get("/v1/app")).status_code == 200  # this node has now seen its key
        # Given a flood of wrong keys from address A, past its budget
        async with from_address(running, "127.0.0.2") as attacker:
            wrong = [
                await attacker.get("/v1/app", headers={"authorization": f"Bearer tjk_{secrets.token_urlsafe(32)}"})
                for _ in range(10)
            ]
            assert [w.status_code for w in wrong[:3]] == [401] * 3
            for refused in wrong[3:]:
                assert_rate_limited(refused)
            assert_rate_limited(await attacker.get("/v1/app"))  # no key at all: the same address's budget
        # Then a key this node has never seen, from address B, is looked up and answered
        async with from_address(running, "127.0.0.3", new_key) as legit_on_b:
            assert (await legit_on_b.get("/v1/app")).status_code == 200
            assert (await legit_on_b.get("/v1/tasks")).status_code == 200
        # and from A itself a key the node has accepted before is answered, while a key new to the node
        # waits for A's budget to refill (it costs a lookup, which A has spent)
        async with from_address(running, "127.0.0.2", seen_key) as legit_on_a:
            assert (await legit_on_a.get("/v1/app")).status_code == 200
        async with from_address(running, "127.0.0.2", new_on_a) as newcomer_on_a:
            assert_rate_limited(await newcomer_on_a.get("/v1/app"))
            LIMITER_TIME.advance(0.4)
            assert (await newcomer_on_a.get("/v1/app")).status_code == 200


async def test_rate_limits_can_be_switched_off() -> None:
    async with node_with(enabled=False, app_requests_per_s=1, unauthenticated_per_s=1) as running:
        _, key = await running.create_app("free")
        async with client_of(running, key) as client, httpx.AsyncClient(base_url=running.base_url) as anyone:
            assert [(await client.get("/v1/app")).status_code for _ in range(10)] == [200] * 10
            assert [(await anyone.get("/v1/app")).status_code for _ in range(10)] == [401] * 10


async def test_admission_middleware_refuses_a_known_app_before_the_inner_layers() -> None:
    from tjobs.api.ratelimit import ADMITTED, AdmissionMiddleware, ApiRateLimits
    from tjobs.service.apps import hash_api_key
    from tjobs.settings import RateLimitSettings

    class Directory:  # the one AppDirectory call the middleware makes
        def __init__(self, known: dict[str, Any]) -> None:
            self.known = known

        def known_app(self, api_key_hash: str) -> Any:
            return self.known.get(api_key_hash)

    class Known:
        id = "app_known"
        settings: ClassVar[dict[str, Any]] = {}

    reached: list[dict[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(scope)

    limits = ApiRateLimits(RateLimitSettings(app_requests_per_s=1, burst_s=1))
    middleware = AdmissionMiddleware(inner, limits, Directory({hash_api_key("tjk_known"): Known()}))  # type: ignore[arg-type]
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    def scope(key: str | None) -> dict[str, Any]:
        headers = [] if key is None else [(b"authorization", f"Bearer {key}".encode())]
        return {"type": "http", "method": "GET", "path": "/v1/app", "headers": headers}

    await middleware(scope("tjk_known"), nothing_to_receive, send)  # admitted: the inner layers run, told so
    assert len(reached) == 1 and reached[0][ADMITTED] == "app_known" and sent == []
    await middleware(scope("tjk_known"), nothing_to_receive, send)  # over the rate: answered here
    assert len(reached) == 1
    assert sent[0]["status"] == 429 and (b"retry-after", b"1") in sent[0]["headers"]
    assert orjson_loads(sent[1]["body"])["error"]["code"] == "rate_limited"
    await middleware(scope("tjk_unknown"), nothing_to_receive, send)  # not known here: the full path decides
    await middleware(scope(None), nothing_to_receive, send)
    assert len(reached) == 3 and ADMITTED not in reached[1] and ADMITTED not in reached[2]


def orjson_loads(raw: bytes) -> Any:
    import orjson

    return orjson.loads(raw)


async def test_a_connection_refused_again_is_answered_when_the_apps_bucket_would_admit_it() -> None:
    """A client that keeps sending over its rate on one connection gets each repeated 429 only once its
    bucket would have admitted the request (at most a second later): uvicorn reads a connection's next
    pipelined request only after answering the current one, so a flood costs the node one answer per
    connection per hold, not one per request sent. A first refusal, or one after an admitted request,
    is answered at once; another connection's first refusal too, and another app's on the same
    connection (apps behind one proxy share its connections).
    """
    from tjobs.api.ratelimit import REFUSAL_HOLD_MAX_S, AdmissionMiddleware, ApiRateLimits
    from tjobs.service.apps import hash_api_key
    from tjobs.settings import RateLimitSettings

    class Known:
        id = "app_known"
        settings: ClassVar[dict[str, Any]] = {}

    class Other:
        id = "app_other"
        settings: ClassVar[dict[str, Any]] = {}

    class Directory:
        def known_app(self, api_key_hash: str) -> Any:
            apps = {hash_api_key("tjk_known"): Known(), hash_api_key("tjk_other"): Other()}
            return apps.get(api_key_hash)

    events: list[tuple[str, Any]] = []

    async def inner(scope: dict[str, Any], receive: Any, send: Any) -> None:
        events.append(("admitted", scope["path"]))

    async def hold(seconds: float) -> None:
        events.append(("hold", round(seconds, 6)))

    async def send(message: MutableMapping[str, Any]) -> None:
        events.append(("send", message.get("status", "body")))

    now = [100.0]
    settings = RateLimitSettings(app_requests_per_s=2, app_expensive_reads_per_s=0.25, burst_s=1)
    limits = ApiRateLimits(settings, monotonic=lambda: now[0])  # time moves only when the test says
    middleware = AdmissionMiddleware(inner, limits, Directory(), hold=hold)  # type: ignore[arg-type]

    def scope(path: str, port: int, key: str) -> dict[str, Any]:
        headers = [(b"authorization", f"Bearer {key}".encode())]
        return {"type": "http", "method": "GET", "path": path, "headers": headers, "client": ("127.0.0.1", port)}

    async def request(path: str, port: int = 50000, key: str = "tjk_known") -> list[tuple[str, Any]]:
        events.clear()
        await middleware(scope(path, port, key), nothing_to_receive, send)
        return list(events)

    refused_now = [("send", 429), ("send", "body")]
    assert await request("/v1/app") == [("admitted", "/v1/app")]
    assert await request("/v1/app") == [("admitted", "/v1/app")]
    assert await request("/v1/app") == refused_now  # 2/s, both tokens taken: the first refusal, at once
    assert await request("/v1/app") == [("hold", 0.5), *refused_now]  # again: held until a token is due
    assert await request("/v1/app", port=50001) == refused_now  # another connection's first refusal
    assert await request("/v1/app", port=50002, key="tjk_other") == [("admitted", "/v1/app")]
    assert await request("/v1/app", port=50002, key="tjk_other") == [("admitted", "/v1/app")]
    assert await request("/v1/app", key="tjk_other") == refused_now  # right after app_known's, on its connection
    assert await request("/v1/app") == [("hold", 0.5), *refused_now]  # app_known's own second refusal is held
    now[0] += 0.5
    assert await request("/v1/app") == [("admitted", "/v1/app")]
    assert await request("/v1/app") == refused_now  # after an admitted request: at once again
    assert await request("/v1/stats") == [("hold", 0.5), *refused_now]  # the requests bucket refuses first
    now[0] += 1.0
    assert await request("/v1/stats") == [("admitted", "/v1/stats")]
    assert await request("/v1/stats") == refused_now
    assert await request("/v1/stats") == [("hold", REFUSAL_HOLD_MAX_S), *refused_now]  # 4 s away: the cap
    assert REFUSAL_HOLD_MAX_S <= 1.0
