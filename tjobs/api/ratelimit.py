"""The API's admission limits: per-app request, expensive-read and create rates, held across the
cluster, and each node's budget of unauthenticated requests per source address.

An app's rates are the cluster's: each node's buckets refill at the rate divided by the live node
count (:mod:`tjobs.cluster.limit_shares`; re-read from the coordinator per request, no round trip),
so N nodes behind one balancer admit the app's rate in all, not N times it. The unauthenticated
budget protects each node's key lookups and stays per node (and per source address).

Each limit is a :class:`tjobs.delivery.token_bucket.TokenBucket` (it holds ``rate_limits.burst_s`` seconds of its
rate). A refused request raises :class:`tjobs.errors.RateLimited`, which the API answers with 429,
``Retry-After`` (whole seconds, at least 1) and the usual JSON error; nothing is queued.

- **Per app** (after authentication; each bucket at this node's share): every request takes one
  token of the app's request bucket (``api_rate_limit_per_s`` in the app's settings, else
  ``rate_limits.app_requests_per_s``); the reads that visit every shard or sum the store
  (:func:`is_expensive_read`: :data:`EXPENSIVE_READS`, and :data:`EXPENSIVE_WITH_QUERY` when its
  parameter is given) also take one of its expensive-read bucket
  (``rate_limits.app_expensive_reads_per_s``); creates take one token per task registered from its
  create bucket (``create_rate_limit_per_s``, else ``rate_limits.app_creates_per_s``). One app's
  buckets are its own: another app never waits on them.
- **Without a valid key**: a missing, malformed or refused key takes one token of its source's
  unauthenticated bucket (``rate_limits.unauthenticated_per_s`` per source address, an IPv6 one by its
  /64: :func:`tjobs.api.credential_limits.source_of`; the :data:`UNAUTHENTICATED_SOURCES_MAX` sources
  seen last); when it is empty that source's such requests get 429 instead of 401. A key this node has
  never seen takes its token *before* its database lookup and gets it back when the key turns out
  valid, so random keys from one source cost at most that many lookups per second. A flood of wrong
  keys from one address spends that address's budget only: another address's requests, a key new to
  the node included, are looked up as before (a single node-wide bucket let one address lock every
  app's new connections out). From the flooding address itself, keys this node has accepted before are
  answered whatever its budget holds; a key new to the node waits (429) for a refill. A refused key's
  hash is remembered for ``unknown_key_ttl_s`` (at most ``unknown_keys_max`` of them, the oldest
  dropped first) and refused again without a lookup.

An app's request token is taken by :class:`AdmissionMiddleware`, in front of every other layer, when
this node has accepted its key before, so a refused request costs no routing, dependency solving or
request accounting (it is counted only in ``tjobs_api_rate_limited_total``); the authentication that
follows for an admitted request does not take it again. A key not yet known takes the whole path.

A connection refused again for the same app right after a refusal (it did not wait) gets its 429 only once the app's
bucket would have admitted the request (at most :data:`REFUSAL_HOLD_MAX_S` later; ``Retry-After`` is
unchanged; the first refusal is answered at once). The server reads a connection's next request only
after answering its current one, so an app flooding over its rate gets one answer per connection per
hold, whatever it sends: the flood costs the node its connections' worth of sleeping requests, not an
HTTP round per request, and other apps' requests do not queue behind its refusals.

A rate of 0 disables that limit; ``rate_limits.enabled = false`` disables all of them. Refusals are
counted by the node in ``tjobs_api_rate_limited_total{app,bucket}``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import Receive, Scope, Send

from tjobs.api.credential_limits import BucketsByKey, source_of
from tjobs.cluster.limit_shares import SOLE_NODE, Membership, rate_share
from tjobs.errors import RateLimited
from tjobs.model import App
from tjobs.service.apps import hash_api_key

if TYPE_CHECKING:
    from tjobs.service.apps import AppDirectory
from tjobs.delivery.token_bucket import TokenBucket
from tjobs.settings import RateLimitSettings

# the longest a repeated refusal's 429 is held back (until the app's bucket would admit it; see the module doc)
REFUSAL_HOLD_MAX_S = 1.0
# source addresses whose unauthenticated budget is kept (the least recently seen forgotten first)
UNAUTHENTICATED_SOURCES_MAX = 10_000
# (connection, app) pairs remembered as refused last (the oldest forgotten first: a closed one is never seen again)
REFUSED_CONNECTIONS_MAX = 10_000

# (method, route path) of the reads that visit every shard: they also take an expensive-read token
EXPENSIVE_READS = frozenset(
    {("GET", "/v1/stats"), ("GET", "/v1/tasks"), ("GET", "/v1/flows"), ("GET", "/v1/dead-letters")}
    | {("GET", "/v1/flows:count"), ("GET", "/v1/flows:export"), ("GET", "/v1/dead-letters:count")}
    | {("POST", "/v1/dead-letters/redrive-jobs")}  # it counts the dead letters again
)
# (method, route path) -> the query parameter that makes it expensive: with ?window= the service levels
# are the cluster's, every node's minutes summed from the store; without it, this node's, from memory
EXPENSIVE_WITH_QUERY = {("GET", "/v1/slo"): "window"}
EXPENSIVE_READS_NAMED = (
    "GET /v1/stats, /v1/tasks, /v1/flows (:count, :export), /v1/dead-letters (:count), /v1/slo?window=; "
    "POST /v1/dead-letters/redrive-jobs"
)


def is_expensive_read(method: str, route_path: str | None, query_names: Iterable[str]) -> bool:
    """Whether this request also takes an expensive-read token (``query_names``: its query parameters)."""
    if route_path is None:
        return False
    if (method, route_path) in EXPENSIVE_READS:
        return True
    parameter = EXPENSIVE_WITH_QUERY.get((method, route_path))
    return parameter is not None and parameter in query_names


def retry_after_s(wait_s: float) -> int:
    return max(1, math.ceil(wait_s))


class OverRate(RateLimited):
    """An app over one of its rates; ``wait_s`` is how long until its bucket would admit the request."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message, retry_after_s(wait_s))
        self.wait_s = wait_s


class _AppBuckets:
    """One app's buckets on this node, each refilling at this node's share of the app's rate."""

    __slots__ = ("creates", "expensive_reads", "nodes", "rates", "requests")

    def __init__(self, rates: tuple[float, float, float], nodes: int, burst_s: float) -> None:
        self.rates = rates  # the app's cluster-wide (requests, expensive reads, creates) per second
        self.nodes = nodes  # the live node count the shares were taken for
        requests_per_s, expensive_reads_per_s, creates_per_s = rates
        self.requests = TokenBucket(rate_share(requests_per_s, nodes), burst_s)
        self.expensive_reads = TokenBucket(rate_share(expensive_reads_per_s, nodes), burst_s)
        self.creates = TokenBucket(rate_share(creates_per_s, nodes), burst_s)

    def reshare(self, rates: tuple[float, float, float], nodes: int, burst_s: float) -> None:
        """The app's settings or the membership changed: each bucket refills at its new share."""
        self.rates, self.nodes = rates, nodes
        for bucket, rate_per_s in zip((self.requests, self.expensive_reads, self.creates), rates, strict=True):
            bucket.set_rate(rate_share(rate_per_s, nodes), burst_s)


class ApiRateLimits:
    """One node's API admission state (see the module doc)."""

    def __init__(
        self,
        settings: RateLimitSettings,
        monotonic: Callable[[], float] = time.monotonic,
        on_refused: Callable[[str, str], None] | None = None,
        membership: Callable[[], Membership] = lambda: SOLE_NODE,
    ) -> None:
        """``on_refused(app_id, bucket)`` sees every refusal (app ``""`` for the unauthenticated budget;
        bucket ``requests``, ``expensive_reads``, ``creates`` or ``unauthenticated``). ``membership``
        answers the live node count, read per request without waiting
        (:meth:`tjobs.cluster.base.Coordinator.membership`): an app's buckets take that share of its rates."""
        self._settings = settings
        self._membership = membership
        self.monotonic = monotonic  # the time source, in seconds (tests hold it still)
        self._on_refused = on_refused
        self._apps: dict[str, _AppBuckets] = {}
        self._unauthenticated = BucketsByKey(
            settings.unauthenticated_per_s, settings.burst_s, UNAUTHENTICATED_SOURCES_MAX
        )
        self._refused_keys: OrderedDict[str, float] = OrderedDict()  # key hash -> refused until (monotonic s)

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    # ---- per app ------------------------------------------------------------------------------

    def admit_request(self, app: App, method: str, route_path: str | None, query_names: Iterable[str] = ()) -> None:
        """Take the app's request token (and an expensive-read token when :func:`is_expensive_read`), or
        raise :class:`OverRate`."""
        if not self._settings.enabled:
            return
        buckets = self._buckets(app)
        now_s = self.monotonic()
        expensive = is_expensive_read(method, route_path, query_names)
        if expensive:
            wait_s = buckets.expensive_reads.take(now_s)
            if wait_s > 0.0:
                self._refused(app.id, "expensive_reads")
                raise OverRate(
                    f"{self._over(app, 'expensive reads', buckets.expensive_reads)} ({EXPENSIVE_READS_NAMED})",
                    wait_s,
                )
        wait_s = buckets.requests.take(now_s)
        if wait_s > 0.0:
            if expensive:
                buckets.expensive_reads.give_back()
            self._refused(app.id, "requests")
            raise OverRate(self._over(app, "requests", buckets.requests), wait_s)

    def would_admit(self, app: App, method: str, route_path: str | None) -> bool:
        """Whether :meth:`admit_request` (without query parameters) would admit this request now; nothing
        is taken and nothing counted."""
        if not self._settings.enabled:
            return True
        buckets = self._buckets(app)
        now_s = self.monotonic()
        if is_expensive_read(method, route_path, ()) and not buckets.expensive_reads.would_take(now_s):
            return False
        return buckets.requests.would_take(now_s)

    def admit_creates(self, app: App, count: int) -> None:
        """Take ``count`` create tokens (a batch counts each task) or refuse them all."""
        if not self._settings.enabled or count <= 0:
            return
        bucket = self._buckets(app).creates
        wait_s = bucket.take(self.monotonic(), float(count))
        if wait_s > 0.0:
            self._refused(app.id, "creates")
            raise RateLimited(self._over(app, "task registrations", bucket), retry_after_s(wait_s))

    def _refused(self, app_id: str, bucket: str) -> None:
        if self._on_refused is not None:
            self._on_refused(app_id, bucket)

    def _buckets(self, app: App) -> _AppBuckets:
        settings = self._settings
        rates = (
            float(app.settings.get("api_rate_limit_per_s") or settings.app_requests_per_s),
            settings.app_expensive_reads_per_s,
            float(app.settings.get("create_rate_limit_per_s") or settings.app_creates_per_s),
        )
        nodes = self._membership().nodes
        buckets = self._apps.get(app.id)
        if buckets is None:
            buckets = self._apps[app.id] = _AppBuckets(rates, nodes, settings.burst_s)
        elif buckets.rates != rates or buckets.nodes != nodes:  # the app's settings or the membership changed
            buckets.reshare(rates, nodes, settings.burst_s)
        return buckets

    def _over(self, app: App, what: str, bucket: TokenBucket) -> str:
        """The refusal's message: the app's cluster-wide rate, and this node's share when it has one."""
        buckets = self._apps[app.id]
        rate_per_s = bucket.rate_per_s * buckets.nodes
        share = f" ({bucket.rate_per_s:g} on each of {buckets.nodes} nodes)" if buckets.nodes > 1 else ""
        return f"app {app.id} is over its rate of {rate_per_s:g} {what} per second{share}"

    # ---- without a valid key ------------------------------------------------------------------

    def is_refused_key(self, key_hash: str) -> bool:
        """``key_hash`` was refused within ``unknown_key_ttl_s``: refuse it again without a lookup."""
        until_s = self._refused_keys.get(key_hash)
        if until_s is None:
            return False
        if until_s > self.monotonic():
            return True
        del self._refused_keys[key_hash]
        return False

    def remember_refused_key(self, key_hash: str) -> None:
        settings = self._settings
        if settings.unknown_key_ttl_s <= 0 or settings.unknown_keys_max <= 0:
            return
        self._refused_keys[key_hash] = self.monotonic() + settings.unknown_key_ttl_s
        self._refused_keys.move_to_end(key_hash)
        while len(self._refused_keys) > settings.unknown_keys_max:
            self._refused_keys.popitem(last=False)

    def admit_unauthenticated(self, address: str) -> None:
        """Take a token of the unauthenticated budget of the source ``address`` (a failed auth, or before
        an unseen key's lookup), or raise :class:`RateLimited`."""
        if not self._settings.enabled:
            return
        wait_s = self._unauthenticated.get(source_of(address)).take(self.monotonic())
        if wait_s > 0.0:
            self._refused("", "unauthenticated")
            raise RateLimited("too many requests without a valid API key from this address", retry_after_s(wait_s))

    def lookup_succeeded(self, address: str) -> None:
        """An unseen key from ``address`` looked up under :meth:`admit_unauthenticated` was valid: its
        token goes back."""
        if self._settings.enabled:
            self._unauthenticated.get(source_of(address)).give_back()


ADMITTED = "tjobs.admitted_app"  # scope key: the app whose request token AdmissionMiddleware took
KEY_HASH = "tjobs.key_hash"  # scope key: (the bearer key, its hash) as AdmissionMiddleware hashed it


class AdmissionMiddleware:
    """Takes a known app's request token before anything else runs, and answers 429 itself when refused;
    a connection refused twice in a row for one app gets the second 429 once the app's bucket would have
    admitted the request (at most :data:`REFUSAL_HOLD_MAX_S` later). A connection is the ASGI ``client``
    address.

    A key is known when this node accepted it before (:meth:`tjobs.service.apps.AppDirectory.known_app`, even
    if that cache entry is stale: refusing with a stale app only answers 429 where 401 may be due).
    Authentication still happens in the route as before; this only moves the token-take forward.
    ``hold`` is the wait (``asyncio.sleep``; tests pass a recorder).
    """

    def __init__(
        self,
        app: Any,
        limits: ApiRateLimits,
        directory: AppDirectory,
        hold: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.app = app
        self._limits = limits
        self._directory = directory
        self._hold = hold
        self._refused_connections: OrderedDict[tuple[Any, ...], None] = OrderedDict()  # last request refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._limits.enabled:
            key = _bearer_key(scope)
            known = None
            if key is not None:
                key_hash = hash_api_key(key)
                scope[KEY_HASH] = (key, key_hash)  # the route's authentication needs it too
                known = self._directory.known_app(key_hash)
            if known is not None:
                try:
                    self._limits.admit_request(known, scope["method"], scope["path"], _query_names(scope))
                except OverRate as refused:
                    if self._refused_again(scope.get("client"), known.id):
                        await self._hold(min(refused.wait_s, REFUSAL_HOLD_MAX_S))
                    await _refuse(send, refused)
                    return
                self.admitted(scope.get("client"), known.id)
                scope[ADMITTED] = known.id
        await self.app(scope, receive, send)

    def admitted(self, client: Any, app_id: str) -> None:
        """A request of ``app_id`` on this connection was admitted: its next refusal is a first one again."""
        if self._refused_connections:
            self._refused_connections.pop(_connection(client, app_id), None)

    def _refused_again(self, client: Any, app_id: str) -> bool:
        """Whether this connection's previous request of ``app_id`` was refused too (apps sharing a
        proxy's connection do not hold each other); it is remembered as refused now."""
        if client is None:
            return False
        connection = _connection(client, app_id)
        if connection in self._refused_connections:
            return True
        self._refused_connections[connection] = None
        if len(self._refused_connections) > REFUSED_CONNECTIONS_MAX:
            self._refused_connections.popitem(last=False)
        return False


def _connection(client: Any, app_id: str) -> tuple[Any, ...]:
    return (*client, app_id) if client is not None else ()


def _query_names(scope: Scope) -> set[str]:
    query = scope.get("query_string", b"").decode("latin-1")
    return {name for name, _ in parse_qsl(query, keep_blank_values=True)} if query else set()


def _bearer_key(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").partition(" ")
            key = key.strip()
            return key if scheme.lower() == "bearer" and key else None
    return None


async def _refuse(send: Send, refused: RateLimited) -> None:
    body = orjson.dumps({"error": {"code": refused.code, "message": refused.message}})
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(refused.retry_after_s).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
