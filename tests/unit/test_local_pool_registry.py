"""The embedded coordinator's pool registry on a hand-moved clock: a heartbeat renews only a lease
that has not ended, and an ended lease is out of every read whether or not anyone renewed since."""

from __future__ import annotations

from tjobs.cluster.local_pools import LocalPoolRegistry
from tjobs.pools.model import Executor


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _executor(executor_id: str, ttl_s: int = 10) -> Executor:
    return Executor(executor_id, f"http://10.0.0.1/{executor_id}", ttl_s=ttl_s)


def test_a_heartbeat_renews_a_live_lease_and_refuses_an_ended_one() -> None:
    clock = _Clock()
    registry = LocalPoolRegistry(clock)
    registry.register("app1", "workers", _executor("a"))
    registry.register("app1", "workers", _executor("b"))
    clock.now_s += 9
    renewed = registry.renew("app1", "workers", "a")
    assert renewed is not None and renewed.id == "a"
    clock.now_s += 1  # b's lease ends now (registered 10 s ago); a's runs 9 s more
    assert registry.renew("app1", "workers", "b") is None
    assert [e.id for e in registry.live("app1", "workers")] == ["a"]
    assert [e.id for e in registry.executors("app1", "workers")] == ["a"]
    clock.now_s += 9
    assert registry.renew("app1", "workers", "a") is None
    assert registry.live("app1", "workers") == ()
    assert registry.pools("app1") == {}


def test_a_heartbeat_names_one_apps_pool_only() -> None:
    registry = LocalPoolRegistry(_Clock())
    registry.register("app1", "workers", _executor("a"))
    assert registry.renew("app2", "workers", "a") is None
    assert registry.renew("app1", "other", "a") is None
    assert registry.renew("app1", "workers", "never") is None


def test_an_ended_lease_is_out_of_the_reads_though_others_were_renewed_since() -> None:
    clock = _Clock()
    registry = LocalPoolRegistry(clock)
    registry.register("app1", "workers", _executor("short", ttl_s=5))
    registry.register("app1", "workers", _executor("long", ttl_s=60))
    assert [e.id for e in registry.live("app1", "workers")] == ["long", "short"]
    clock.now_s += 6
    assert registry.renew("app1", "workers", "long") is not None
    assert [e.id for e in registry.live("app1", "workers")] == ["long"]
    assert registry.register("app1", "workers", _executor("short", ttl_s=5)) is True  # anew, not a renewal


def test_each_live_executor_shows_the_time_since_its_heartbeat_and_until_its_lease_ends() -> None:
    clock = _Clock()
    registry = LocalPoolRegistry(clock)
    registry.register("app1", "workers", _executor("a", ttl_s=10))
    registry.register("app1", "other", _executor("b", ttl_s=30))
    clock.now_s += 4
    registry.renew("app1", "workers", "a")  # a heartbeat: the age starts again, the lease is whole again
    clock.now_s += 2.5
    leases = registry.leases("app1")
    assert list(leases) == ["other", "workers"]
    (a,) = leases["workers"]
    assert (a.executor.id, a.heartbeat_age_ms, a.lease_left_ms) == ("a", 2_500, 7_500)
    (b,) = leases["other"]
    assert (b.heartbeat_age_ms, b.lease_left_ms) == (6_500, 23_500)  # registered, never renewed
    assert list(registry.leases("app1", "workers")) == ["workers"]
    assert registry.leases("app2") == {} and registry.leases("app1", "none") == {}
    clock.now_s += 8  # a's lease ended
    assert list(registry.leases("app1")) == ["other"]
