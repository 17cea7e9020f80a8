"""Cluster-wide limits as per-node shares (tjobs.cluster.limit_shares): the arithmetic, and the API's
buckets following the membership the coordinator last read.

The shares of every node add up to the limit: a rate divided by the live node count, the quota's room
divided into whole shares that sum to it exactly. One node alone has every limit whole.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.test_rate_limits import StillTime
from tjobs.api.ratelimit import ApiRateLimits, OverRate
from tjobs.cluster.limit_shares import (
    SOLE_NODE,
    Membership,
    members_share,
    quota_share,
    quota_share_allows,
    rate_share,
)
from tjobs.errors import RateLimited
from tjobs.model import App
from tjobs.settings import RateLimitSettings

# ---- the arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate_per_s", "nodes", "share"),
    [(900.0, 1, 900.0), (900.0, 3, 300.0), (10.0, 4, 2.5), (0.0, 3, 0.0), (50.0, 0, 50.0)],
)
def test_a_rate_is_split_evenly_over_the_live_nodes(rate_per_s: float, nodes: int, share: float) -> None:
    assert rate_share(rate_per_s, nodes) == share


@pytest.mark.parametrize("nodes", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("room", [-7, -1, 0, 1, 2, 3, 10, 50, 1001])
@pytest.mark.parametrize("app_id", ["a", "orders", "refunds-eu"])
def test_the_quota_shares_of_every_rank_add_up_to_the_room_exactly(nodes: int, room: int, app_id: str) -> None:
    shares = [quota_share(room, app_id, Membership(nodes, rank)) for rank in range(nodes)]
    assert sum(shares) == room
    assert max(shares) - min(shares) <= 1  # as even as whole shares can be


def test_one_node_alone_has_the_whole_room() -> None:
    assert quota_share(17, "orders", SOLE_NODE) == 17


def test_the_odd_units_of_the_room_go_to_different_nodes_for_different_apps() -> None:
    holders = {
        next(rank for rank in range(3) if quota_share(1, f"app-{n}", Membership(3, rank)) == 1) for n in range(30)
    }
    assert holders == {0, 1, 2}


@pytest.mark.parametrize(
    ("counted", "own_since", "adding", "allowed"),
    [(0, 0, 10, True), (0, 10, 1, False), (5, 4, 1, True), (5, 5, 1, False), (12, 0, 1, False), (8, -3, 5, True)],
)
def test_one_node_keeps_the_quota_rule_of_counted_plus_own_plus_new(
    counted: int, own_since: int, adding: int, allowed: bool
) -> None:
    assert quota_share_allows(10, counted, own_since, adding, "orders", SOLE_NODE) is allowed


def test_three_nodes_from_one_count_admit_the_room_and_no_more() -> None:
    quota, counted = 50, 20
    admitted = 0
    for rank in range(3):
        own = 0
        while quota_share_allows(quota, counted, own, 1, "orders", Membership(3, rank)):
            own += 1
        admitted += own
    assert admitted == quota - counted


def test_a_node_that_deleted_tasks_since_its_count_has_that_much_more_room() -> None:
    membership = Membership(3, 0)
    share = quota_share(30, "orders", membership)
    assert quota_share_allows(30, 0, share - 4, 4, "orders", membership)
    assert not quota_share_allows(30, 0, share - 4, 5, "orders", membership)
    assert quota_share_allows(30, 0, share - 6, 5, "orders", membership)  # after deleting two


def test_an_unlimited_quota_admits_anything() -> None:
    assert quota_share_allows(0, 10**9, 10**9, 10**9, "orders", Membership(3, 2))


def test_membership_counts_every_member_and_this_node_ranked_by_id() -> None:
    assert members_share(["n2", "n0", "n1"], "n1") == Membership(3, 1)
    assert members_share(["n2", "n0"], "n1") == Membership(3, 1)  # before its own key is seen
    assert members_share([], "solo") == SOLE_NODE


# ---- the API's buckets follow the membership ---------------------------------------------------


class Members:
    def __init__(self, nodes: int) -> None:
        self.current = Membership(nodes, 0)

    def __call__(self) -> Membership:
        return self.current


def app_with(app_id: str, **settings: Any) -> App:
    return App(id=app_id, name=app_id, api_key_hash="", secrets=["s"], settings=settings)


def limits(members: Members, clock: StillTime, **settings: Any) -> ApiRateLimits:
    return ApiRateLimits(RateLimitSettings(burst_s=1.0, **settings), monotonic=clock, membership=members)


def admitted_requests(limits: ApiRateLimits, app: App, tries: int = 100) -> int:
    admitted = 0
    for _ in range(tries):
        try:
            limits.admit_request(app, "GET", "/v1/tasks/{task_id}")
        except OverRate:
            continue
        admitted += 1
    return admitted


def test_each_node_admits_its_share_of_an_apps_request_rate() -> None:
    clock = StillTime()
    assert admitted_requests(limits(Members(3), clock, app_requests_per_s=30), app_with("a")) == 10
    assert admitted_requests(limits(Members(1), clock, app_requests_per_s=30), app_with("a")) == 30


def test_an_apps_own_rate_and_its_creates_are_shared_too() -> None:
    clock = StillTime()
    node = limits(Members(2), clock, app_creates_per_s=100)
    app = app_with("a", api_rate_limit_per_s=8)
    assert admitted_requests(node, app) == 4
    node.admit_creates(app, 50)
    with pytest.raises(RateLimited, match=r"over its rate of 100 task registrations per second \(50 on each of 2"):
        node.admit_creates(app, 1)


def test_a_membership_change_reshapes_the_buckets_at_the_next_request() -> None:
    clock, members = StillTime(), Members(1)
    node = limits(members, clock, app_requests_per_s=6)
    app = app_with("a")
    assert admitted_requests(node, app) == 6
    members.current = Membership(3, 0)  # two nodes joined: this node's share is 2/s
    clock.advance(1.0)
    assert admitted_requests(node, app) == 2
    members.current = Membership(2, 0)  # one left: 3/s
    clock.advance(1.0)
    assert admitted_requests(node, app) == 3


def test_a_refusal_names_the_apps_rate_and_this_nodes_share() -> None:
    node = limits(Members(3), StillTime(), app_requests_per_s=30)
    app = app_with("a")
    admitted_requests(node, app)
    with pytest.raises(OverRate, match=r"over its rate of 30 requests per second \(10 on each of 3 nodes\)"):
        node.admit_request(app, "GET", "/v1/tasks/{task_id}")


def test_the_unauthenticated_budget_stays_per_node() -> None:
    node = limits(Members(3), StillTime(), unauthenticated_per_s=6)  # not a third of it: it is not shared
    for _ in range(6):
        node.admit_unauthenticated("192.0.2.1")
    with pytest.raises(RateLimited):
        node.admit_unauthenticated("192.0.2.1")
    node.admit_unauthenticated("192.0.2.2")  # and it is each source address's own
