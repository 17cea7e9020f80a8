"""Node faults on a primary (node 2 of 3): kill -9, SIGSTOP past its lease, SIGTERM hand-off.

Each run: 0 lost, 0 duplicate flows, 0 phantom, every 201 readable, no attempt number sent twice; the
instants its jobs had due while it was gone are delivered at most 7 s late (lease TTL 5 s + takeover).
"""

from __future__ import annotations

import pytest

from testkit.cluster_rig import ClusterRig
from tests.chaos import faults
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.scenario import Profile, assert_clean, profiles, run

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis]

TAKEOVER_LIMIT_MS = 7000


@pytest.mark.parametrize("profile", profiles())
async def test_kill_9_of_a_primary_loses_nothing_and_its_jobs_fire_within_7s(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.kill_node())
    assert_clean(outcome)
    late = outcome.victim_delivered_late_ms()
    assert late, "the victim's jobs had instants due during the takeover"
    assert max(late) <= TAKEOVER_LIMIT_MS, outcome.summary()


@pytest.mark.parametrize("profile", profiles())
async def test_sigstop_of_a_primary_delivers_what_fell_due_within_7s_and_it_sends_nothing_after(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.freeze_node())
    stale = outcome.stale_sends()
    outcome.notes["stale_sends"] = len(stale)
    assert_clean(outcome)
    late = outcome.victim_delivered_late_ms()
    assert late, "the victim's jobs had instants due during the stop"
    assert max(late) <= TAKEOVER_LIMIT_MS, outcome.summary()
    assert stale == [], f"the frozen node sent {len(stale)} requests after its lease expired: {stale[:3]}"


@pytest.mark.parametrize("profile", profiles())
async def test_sigterm_hands_a_primarys_jobs_over_without_loss(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.terminate_node())
    assert_clean(outcome)
    late = outcome.victim_delivered_late_ms()
    assert max(late, default=0) <= TAKEOVER_LIMIT_MS, outcome.summary()
