"""Wrong-credential limits keyed by who is guessed and from where: one bucket per source address and one
per account name, so a flood of wrong passwords or tokens from one address, or on one name, slows only
that address or that name; everyone else signs in as before (a single node-wide bucket let one attacker
lock every operator out).

Only failures spend tokens: :meth:`CredentialLimits.check` refuses (429, ``Retry-After``) while either
bucket is empty, and :meth:`CredentialLimits.failed` spends one token of each after a wrong credential.
Buckets are kept per node for the most recent :data:`TRACKED_MAX` addresses and names (the oldest forgotten
first); each holds ``burst`` failures and refills at ``per_minute``.

A source address is the peer's (:func:`tjobs.api.principal.client_address`), an IPv6 one taken by its /64
(:func:`source_of`: one host commonly holds a whole /64, and would otherwise have a fresh bucket per
address). :class:`BucketsByKey` is also what keys the API's budget of requests without a valid key by
source (:meth:`tjobs.api.ratelimit.ApiRateLimits.admit_unauthenticated`).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable

from tjobs.delivery.token_bucket import TokenBucket
from tjobs.errors import RateLimited

TRACKED_MAX = 10_000
PER_ADDRESS_PER_MIN = 10.0  # wrong credentials from one address
PER_ACCOUNT_PER_MIN = 5.0  # wrong passwords for one account name, from any address
BURST = 10.0


def source_of(address: str) -> str:
    """The key a source address is limited by: an IPv4 address itself, an IPv6 address its /64 (an
    IPv4-mapped one, the IPv4 address), anything else (``""``, a Unix socket's name) as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return address


class BucketsByKey:
    """A token bucket per key (a source, an account name), each at ``rate_per_s`` holding ``burst_s`` of
    it, for the ``tracked_max`` keys used last (the least recently used forgotten first)."""

    def __init__(self, rate_per_s: float, burst_s: float, tracked_max: int = TRACKED_MAX) -> None:
        self.rate_per_s = rate_per_s
        self.burst_s = burst_s
        self.tracked_max = tracked_max
        self.items: OrderedDict[str, TokenBucket] = OrderedDict()

    def get(self, key: str) -> TokenBucket:
        bucket = self.items.get(key)
        if bucket is None:
            bucket = self.items[key] = TokenBucket(self.rate_per_s, self.burst_s)
            if len(self.items) > self.tracked_max:
                self.items.popitem(last=False)
        self.items.move_to_end(key)
        return bucket


def _per_minute(per_minute: float) -> BucketsByKey:
    rate_per_s = per_minute / 60.0
    return BucketsByKey(rate_per_s, BURST / rate_per_s)


class CredentialLimits:
    def __init__(
        self,
        per_address_per_min: float = PER_ADDRESS_PER_MIN,
        per_account_per_min: float = PER_ACCOUNT_PER_MIN,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._addresses = _per_minute(per_address_per_min)
        self._accounts = _per_minute(per_account_per_min)
        self.monotonic = monotonic

    def check(self, address: str, account: str | None) -> None:
        """Raise :class:`RateLimited` if ``address`` or ``account`` has no failure left to spend."""
        now_s = self.monotonic()
        for what, buckets, key in (
            ("address", self._addresses, source_of(address)),
            ("account", self._accounts, account),
        ):
            if key is None:
                continue
            bucket = buckets.get(key)
            if not bucket.would_take(now_s):
                wait_s = max(1.0, bucket.tat - now_s - bucket.tolerance_s)
                raise RateLimited(f"too many wrong credentials for this {what}; try again later", int(wait_s) + 1)

    def failed(self, address: str, account: str | None) -> None:
        """A wrong credential from ``address`` (for ``account``, when one was named)."""
        now_s = self.monotonic()
        self._addresses.get(source_of(address)).take(now_s)
        if account is not None:
            self._accounts.get(account).take(now_s)
