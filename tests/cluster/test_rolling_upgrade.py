"""A rolling upgrade on real processes (docs/operations.md, "Upgrades"): two nodes of the previous release
fire one-shot tasks on etcd, Redis and 2 MariaDB servers; this version's online migrations are applied while
they fire; each node is replaced in turn by this version, and tasks created through the new node are fired
by old and new alike. Counted at the receiver and in the flows: every task delivered, 0 lost, 0 duplicate.

The previous release is a fixed commit of this repository, checked out by the fixture as a detached git
worktree and run on this checkout's interpreter and dependencies (``PYTHONPATH``), so nothing is installed.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.children import REPO
from testkit.cluster_rig import Api, ClusterRig, Infra, now_ms
from testkit.databases import drop_databases
from tests.cluster.workload import collect_when_fired, schedule
from tests.receiver import Receiver
from tjobs.settings import StorageSettings
from tjobs.stores.migration_plan import migration_plan

pytestmark = [pytest.mark.slow, pytest.mark.mariadb, pytest.mark.etcd, pytest.mark.redis, pytest.mark.timeout(300)]

# The parent of the commit that added 0024_task_parents: upgrading from it creates a table while its nodes
# fire. (An upgrade from before 0023 is offline: a column added to tasks_TT blocks their writes on MariaDB.)
PREVIOUS_RELEASE = "d4683002a791fd6ee39c73194bdd738109af6074"
PREVIOUS_HEAD = "0023_task_children"
EVERY_MS = 30


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tree = tmp_path_factory.mktemp("previous") / "tree"
    git = ["git", "-C", str(REPO)]
    subprocess.run([*git, "worktree", "add", "--detach", str(tree), PREVIOUS_RELEASE], check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False, capture_output=True)


@pytest.fixture
def old_rig(infra: Infra, previous_release: Path, tmp_path: Path) -> Iterator[ClusterRig]:
    """A rig on databases of its own, migrated by the previous release."""
    infra.ensure()
    prefix = f"tjup_{secrets.token_hex(3)}"
    rig = ClusterRig(infra, tmp_path, f"u{secrets.token_hex(4)}", prefix)
    try:
        rig.migrate(previous_release)
        yield rig
    finally:
        rig.stop_all()
        drop_databases(StorageSettings(urls=infra.storage_urls, database_prefix=prefix))


async def replace(rig: ClusterRig, api: Api, index: int) -> None:
    """Stop node ``index`` (SIGTERM: it drains and hands off) and start this version in its place."""
    await asyncio.to_thread(rig.stop, index)
    rig.start(index)
    await api.wait_healthy(rig.nodes[index])
    await api.wait_stable(2, timeout_s=45)


async def test_a_rolling_upgrade_with_online_migrations_loses_and_doubles_no_fire(
    old_rig: ClusterRig, previous_release: Path, receiver: Receiver
) -> None:
    rig = old_rig
    api = Api(rig)
    try:
        # Given two nodes of the previous release firing a task every 30 ms
        for index in (1, 2):
            rig.start(index, tree=previous_release)
        for node in rig.live():
            await api.wait_healthy(node)
        await api.wait_stable(2)
        await api.create_app(rig.nodes[1])
        start = now_ms() + 4000
        end = start + 34_000
        tasks = await schedule(api, rig.nodes[1], receiver.url(), start, end, EVERY_MS)
        await asyncio.sleep(max(start + 2000 - now_ms(), 0) / 1000)

        # When this version's migrations, every one online, are applied while they fire
        settings = StorageSettings(urls=rig.infra.storage_urls, topology=rig.topology, database_prefix=rig.db_prefix)
        recorded, pending = await migration_plan(settings)
        assert recorded == [PREVIOUS_HEAD]
        assert [m.revision for m in pending[:1]] == ["0024_task_parents"]
        assert all(m.online for m in pending), pending
        began = time.monotonic()
        await asyncio.to_thread(rig.migrate)
        migrate_s = time.monotonic() - began
        assert (await migration_plan(settings))[1] == []

        # And the nodes are replaced one at a time, tasks created through the new node 1 meanwhile
        await replace(rig, api, 1)
        later = now_ms() + 1500
        tasks |= await schedule(api, rig.nodes[1], receiver.url(), later + EVERY_MS // 2, end, EVERY_MS)
        await replace(rig, api, 2)

        # Then every task fired once: one flow each, delivered, and one flow id at the receiver
        outcome = await collect_when_fired(api, rig.nodes[1], tasks, 15_000)
    finally:
        await api.close()
    assert outcome.lost == [] and outcome.duplicated == []
    flow_ids: dict[int, set[str]] = defaultdict(set)
    first_ms: dict[int, int] = {}
    for request in receiver.requests:
        task = int(request.headers["tjobs-task-id"])
        flow_ids[task].add(request.flow_id)
        first_ms[task] = min(
            first_ms.get(task, request.received_at_ns // 1_000_000), request.received_at_ns // 1_000_000
        )
    missing = sorted(set(tasks) - set(flow_ids))
    doubled = {task: ids for task, ids in flow_ids.items() if len(ids) > 1}
    strangers = sorted(set(flow_ids) - set(tasks))
    assert (missing, doubled, strangers) == ([], {}, []), f"lost {missing[:10]}, doubled {doubled}"
    assert all(flow_ids[task] == {f"{task}-{at}"} for task, at in tasks.items())
    late_ms = sorted(first_ms[task] - at for task, at in tasks.items())
    print(
        f"rolling upgrade: {len(tasks)} tasks, migrate {migrate_s:.1f} s, first-receipt lateness "
        f"p50 {late_ms[len(late_ms) // 2]} ms, p99 {late_ms[len(late_ms) * 99 // 100]} ms, max {late_ms[-1]} ms"
    )
