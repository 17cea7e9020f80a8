"""One of the two MariaDB servers fails (kill -9 or SIGSTOP for 15 s; SIGSTOP of the one holding the apps
table too) or has its task rows locked for 13 s (``BEGIN; SELECT ... FOR UPDATE; DO SLEEP(13)``, held past
innodb_lock_wait_timeout).

Each run: 0 lost, 0 duplicate flows, 0 phantom, every 201 readable, no attempt number sent twice; and the
blast radius is one server: tasks on the healthy server fire on time through the fault (p99 of their
lateness ≤ 1 s), and creates of tasks on the healthy server sent during the fault are answered promptly
(p99 ≤ 1 s; ≤ 11 ms measured outside the apps-server freeze, where they waited for the frozen server's
key lookup until issue 28's key copies). The quick row-lock run keeps the product defaults (cycle 300 s,
fire_soon).
"""

from __future__ import annotations

import pytest

from testkit.cluster_rig import ClusterRig
from tests.chaos import faults
from tests.chaos.accounting import percentile
from tests.chaos.receiver import ChaosReceiver
from tests.chaos.scenario import QUICK, Outcome, Profile, assert_clean, profiles, run

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis]

HEALTHY_P99_LIMIT_MS = 1000
HEALTHY_CREATE_P99_LIMIT_MS = 1000
APPS_SERVER = 0  # the first of storage.urls holds the apps and targets tables


def assert_healthy_server_on_time(outcome: Outcome, rig: ClusterRig) -> None:
    late = outcome.healthy_first_send_late_ms()
    assert late, "the healthy server had instants due during the fault"
    if percentile(late, 0.99) > HEALTHY_P99_LIMIT_MS:
        # What a rare failure needs to be explained: which fires were held, and what the nodes said.
        logs = "\n".join(f"--- node{i} (warnings and errors)\n{rig.warnings(i)}" for i in sorted(rig.nodes))
        pytest.fail(
            f"{outcome.summary()}\nhealthy-server fires later than {HEALTHY_P99_LIMIT_MS} ms:\n"
            f"{outcome.late_healthy_instants(HEALTHY_P99_LIMIT_MS)}\n{logs}"
        )
    creates = outcome.healthy_create_ms()
    assert creates, "creates of healthy-server tasks were sent during the fault"
    assert percentile(creates, 0.99) <= HEALTHY_CREATE_P99_LIMIT_MS, (
        f"{outcome.summary()}\ncreates of healthy-server tasks sent during the fault took longer than "
        f"{HEALTHY_CREATE_P99_LIMIT_MS} ms (p99); slowest: {sorted(creates)[-10:]}"
    )


@pytest.mark.parametrize("profile", profiles())
async def test_one_mariadb_server_killed_for_15s_loses_nothing_and_the_other_fires_on_time(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.kill_mariadb())
    assert_clean(outcome)
    assert_healthy_server_on_time(outcome, rig)


@pytest.mark.parametrize("profile", profiles())
async def test_one_mariadb_server_frozen_for_15s_loses_nothing_and_the_other_fires_on_time(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.freeze_mariadb())
    assert_clean(outcome)
    assert_healthy_server_on_time(outcome, rig)


@pytest.mark.parametrize("profile", profiles())
async def test_the_mariadb_server_holding_the_apps_table_frozen_for_15s_loses_nothing_and_the_other_fires_on_time(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    # Issue 28: server 0 holds the apps table, so every callback's app (secrets, allow-list) comes from
    # it; the other server's callbacks go on from each node's last good copy (directory.serve_stale_s)
    # instead of stopping when the app's cache entry expires inside the freeze.
    outcome = await run(rig, receiver, profile, faults.freeze_mariadb(server=APPS_SERVER))
    assert_clean(outcome)
    assert_healthy_server_on_time(outcome, rig)


@pytest.mark.parametrize("profile", profiles(QUICK.with_defaults()))
async def test_row_lock_held_13s_on_one_server_loses_nothing_and_the_other_fires_on_time(
    rig: ClusterRig, receiver: ChaosReceiver, profile: Profile
) -> None:
    outcome = await run(rig, receiver, profile, faults.lock_rows())
    assert_clean(outcome)
    assert_healthy_server_on_time(outcome, rig)
