"""etcd killed (kill -9, restarted after 7 s) or frozen (SIGSTOP 7 s, past the lease TTL), and the Redis
hot tier flushed while one-shot tasks travel through it.

Each run: 0 lost, 0 duplicate flows, 0 phantom, every 201 readable, no attempt number sent twice; after
etcd is back, instants due 5 s later or more fire on time again (< 1 s late).
"""

from __future__ import annotations

import pytest

from testkit.cluster_rig import ClusterRig
from tests.chaos import faults
from tests.chaos.accounting import select
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.scenario import Outcome, Profile, assert_clean, profiles, run

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis]

RESUME_AFTER_MS = 5000
ON_TIME_MS = 1000


def assert_on_time_after(outcome: Outcome) -> None:
    f = outcome.figures
    late = select(f.first_send_late_ms, outcome.promises, due_from_ms=outcome.window.end_ms + RESUME_AFTER_MS)
    assert late, "instants were due after the cluster recovered"
    assert max(late) < ON_TIME_MS, outcome.summary()


@pytest.mark.parametrize("profile", profiles(quick=None))  # tests/cluster/test_etcd_outage.py runs in CI
async def test_etcd_killed_and_restarted_loses_nothing(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.kill_etcd())
    assert_clean(outcome)
    assert_on_time_after(outcome)


@pytest.mark.parametrize("profile", profiles(quick=None))
async def test_etcd_frozen_past_the_lease_ttl_loses_nothing(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.freeze_etcd())
    assert_clean(outcome)
    assert_on_time_after(outcome)


@pytest.mark.parametrize("profile", profiles())
async def test_redis_flushed_under_the_one_shot_stream_loses_nothing(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.flush_redis())
    assert_clean(outcome)
