"""The wrong-credential and unauthenticated budgets are kept per source: an IPv4 address, an IPv6 /64."""

from __future__ import annotations

import pytest

from tjobs.api.credential_limits import BucketsByKey, CredentialLimits, source_of
from tjobs.errors import RateLimited


@pytest.mark.parametrize(
    ("address", "source"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("", ""),
        ("unix-socket", "unix-socket"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_64(address: str, source: str) -> None:
    assert source_of(address) == source


def test_wrong_credentials_from_one_ipv6_64_are_one_sources() -> None:
    limits = CredentialLimits(monotonic=lambda: 1_000.0)
    for n in range(10):  # a new address of the same /64 each time
        limits.failed(f"2001:db8:1:2::{n + 1:x}", None)
    with pytest.raises(RateLimited, match="address"):
        limits.check("2001:db8:1:2::ffff", None)
    limits.check("2001:db8:1:3::1", None)  # the next /64 is another source


def test_only_the_sources_used_last_are_kept() -> None:
    buckets = BucketsByKey(1.0, 1.0, tracked_max=2)
    first = buckets.get("a")
    buckets.get("b")
    assert buckets.get("a") is first  # used again: kept
    buckets.get("c")
    assert list(buckets.items) == ["a", "c"]
