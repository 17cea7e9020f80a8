"""The receiver answers 10 % of requests 500 and lets 1 % time out for the whole window: every instant is
still delivered (retries), each flow keeps its id, and every re-send carries a new attempt number."""

from __future__ import annotations

import pytest

from testkit.cluster_rig import ClusterRig
from tests.chaos import faults
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.scenario import Profile, assert_clean, profiles, run

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis]


@pytest.mark.parametrize("profile", profiles())
async def test_failing_receiver_gets_every_instant_with_increasing_attempts(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.failing_receiver())
    retried = sum(1 for c in outcome.callbacks if c.attempt > 1)
    outcome.notes["retried_requests"] = retried
    assert_clean(outcome)
    assert retried > 0, "the receiver's faults caused retries"
