"""An app's run log retention (README "Job runs", ``run_log_retention_days``): :meth:`RunRecords.purge_run_logs`
on every backend clears the log of exactly the app's ended flows of a shard that finished before the
cut-off and hold a log, page by page in (instant, task id) order, keeping the run, its status and the
line count (so the flow shows its log as purged, not as empty); an open flow, one that ended after the
cut-off, another app's flow and another shard's are left as they are, and a purged log takes no append.
On MariaDB a page's transaction examines rows in proportion to the page, not to the app's flows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.backends import NOW_MS, make_task, manual_flow, measure_writes
from tjobs.model import Flow, FlowStatus, Task
from tjobs.settings import StorageSettings
from tjobs.stores.base import TaskStore
from tjobs.stores.sql_layout import create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

SHARD = 5
CUT = NOW_MS
LINE = '{"at": 1, "attempt": 1, "line": "x"}\n'


async def _flow(store: TaskStore, task: Task, at_ms: int, status: FlowStatus, ended_ms: int, lines: int) -> Flow:
    flow = await store.insert_manual_flow(task.id, replace(manual_flow(task, at_ms, status), updated_at_ms=ended_ms))
    if lines:
        assert await store.append_run_log(task.id, at_ms, LINE * lines, lines, 100)
    return flow


async def _walk(store: TaskStore, app_id: str, limit: int) -> tuple[int, int, tuple[int, int] | None]:
    """Pages until one reads fewer than ``limit``: (cleared, pages, first unsettled key)."""
    after = None
    cleared = pages = 0
    unsettled = None
    while True:
        page = await store.purge_run_logs(SHARD, app_id, CUT, limit, after)
        pages += 1
        cleared += page.cleared
        assert page.read <= limit
        if unsettled is None:
            unsettled = page.unsettled
        if page.read < limit:
            return cleared, pages, unsettled
        after = page.last


async def test_the_logs_of_the_apps_flows_ended_before_the_cutoff_are_cleared_and_nothing_else(
    store: TaskStore,
) -> None:
    task = await store.insert_task(make_task(shard=SHARD))
    other_task = await store.insert_task(make_task(shard=SHARD))  # same app, another task: interleaved
    other_app = await store.insert_task(make_task(shard=SHARD, app_id="app-b"))
    other_shard = await store.insert_task(make_task(shard=SHARD + 1))
    old = CUT - 10 * 86_400_000
    doomed = [
        await _flow(store, t, old + i, FlowStatus.DELIVERED if i % 2 else FlowStatus.DEAD, old + i + 5, 3)
        for i, t in enumerate([task, other_task] * 4)
    ]
    kept = {
        "open": await _flow(store, task, old + 100, FlowStatus.RUNNING, old + 100, 2),
        "ended after the cut": await _flow(store, task, CUT - 1000, FlowStatus.DELIVERED, CUT + 1, 2),
        "scheduled after the cut": await _flow(store, task, CUT + 5, FlowStatus.DELIVERED, CUT + 6, 2),
        "other app": await _flow(store, other_app, old + 1, FlowStatus.DELIVERED, old + 2, 2),
        "other shard": await _flow(store, other_shard, old + 1, FlowStatus.DELIVERED, old + 2, 2),
    }
    no_log = await _flow(store, task, old + 50, FlowStatus.DELIVERED, old + 51, 0)

    cleared, pages, unsettled = await _walk(store, "app-a", 3)

    assert cleared == len(doomed)
    assert pages >= 4  # at most 3 flows read a page: the 8 doomed, the one without a log, the open one...
    assert unsettled == (old + 100, task.id)  # the first flow read that may still get a log cleared later
    for flow in doomed:
        stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None
        assert (stored.run_log, stored.run_log_lines, stored.status) == (None, 3, flow.status)
        assert stored.run_log_purged and stored.updated_at_ms == flow.updated_at_ms
    for why, flow in kept.items():
        stored = await store.get_flow(flow.task_id, flow.scheduled_at_ms)
        assert stored is not None and stored.run_log == LINE * 2 and not stored.run_log_purged, why
    stored = await store.get_flow(no_log.task_id, no_log.scheduled_at_ms)
    assert stored is not None and stored.run_log is None and not stored.run_log_purged

    # a purged log takes no append (its flow ended; the lines would show as the whole log); a second walk
    # clears nothing
    assert not await store.append_run_log(doomed[0].task_id, doomed[0].scheduled_at_ms, LINE, 1, 100)
    assert (await _walk(store, "app-a", 3))[0] == 0


async def test_a_page_after_the_last_flow_reads_nothing(store: TaskStore) -> None:
    task = await store.insert_task(make_task(shard=SHARD))
    old = CUT - 86_400_000
    for i in range(3):
        await _flow(store, task, old + i, FlowStatus.DELIVERED, old + i, 1)
    first = await store.purge_run_logs(SHARD, "app-a", CUT, 3, None)
    assert (first.cleared, first.read, first.last, first.unsettled) == (3, 3, (old + 2, task.id), None)
    second = await store.purge_run_logs(SHARD, "app-a", CUT, 3, first.last)
    assert (second.cleared, second.read, second.last, second.unsettled) == (0, 0, None, None)
    assert (await store.purge_run_logs(SHARD, "app-none", CUT, 3, None)).read == 0


async def test_a_dead_flow_redriven_after_its_log_was_purged_logs_again(store: TaskStore) -> None:
    """A redrive starts new runs: the purged log is not theirs, so it starts empty and takes lines again
    (else every line of the new runs would be dropped as if the log were still purged)."""
    task = await store.insert_task(make_task(shard=SHARD))
    old = CUT - 86_400_000
    dead = await _flow(store, task, old, FlowStatus.DEAD, old, 3)
    kept = await _flow(store, task, old + 1, FlowStatus.DEAD, CUT + 1, 3)  # ended after the cut: not purged
    assert (await store.purge_run_logs(SHARD, "app-a", CUT, 10)).cleared == 1

    redriven = await store.redrive_flow(dead.task_id, dead.scheduled_at_ms, CUT + 10)
    assert redriven is not None and not redriven.run_log_purged
    assert (redriven.run_log, redriven.run_log_lines) == (None, 0)
    assert await store.append_run_log(dead.task_id, dead.scheduled_at_ms, LINE, 1, 100)
    stored = await store.get_flow(dead.task_id, dead.scheduled_at_ms)
    assert stored is not None and (stored.run_log, stored.run_log_lines) == (LINE, 1)

    again = await store.redrive_flow(kept.task_id, kept.scheduled_at_ms, CUT + 10)  # a log held is kept
    assert again is not None and (again.run_log, again.run_log_lines) == (LINE * 3, 3)


# ---- MariaDB: what a page examines --------------------------------------------------------------------


async def _fill(
    store: SQLAlchemyTaskStore, settings: StorageSettings, task_id: int, first_at: int, count: int, log: bool
) -> None:
    """``count`` delivered flows of app-a's task ``task_id`` in ``SHARD``'s table, scheduled (and ended) 1 ms
    apart from ``first_at``, one log line each: held (``log``) or purged already."""
    home = store.layout.shards[SHARD]
    engine = create_engine_for(home.database.engine_url, settings)
    text = "'log line'" if log else "NULL"  # what the log holds does not matter to the purge
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                f"INSERT INTO {home.flows_sql} (task_id, scheduled_at, app_id, kind, status, attempts, "
                "next_attempt_at, missed, created_at, updated_at, run_log, run_log_lines) "
                f"SELECT {task_id}, {first_at} + seq, 'app-a', 'scheduled', 'delivered', 1, NULL, 0, {first_at}, "
                f"{first_at} + seq, {text}, 1 FROM `{home.database.name}`.seq_0_to_{count - 1}"
            )
    finally:
        await engine.dispose()


@pytest.mark.mariadb
async def test_a_page_examines_rows_in_proportion_to_the_page_not_to_the_apps_flows(
    mariadb_store: SQLAlchemyTaskStore, mariadb_store_settings: StorageSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 ended flows of the app whose logs were purged already, then 20 holding a log: a page from
    where the last walk stopped examines about those 20, not the 20,000 before them; a page from the start
    examines about its own rows."""
    store = mariadb_store
    reads = measure_writes(monkeypatch)
    task = await store.insert_task(make_task(shard=SHARD))
    old = CUT - 5 * 86_400_000
    await _fill(store, mariadb_store_settings, task.id, old, 20_000, log=False)
    await _fill(store, mariadb_store_settings, task.id, old + 20_000, 20, log=True)

    page = await store.purge_run_logs(SHARD, "app-a", CUT, 200, (old + 19_999, task.id))
    assert (page.cleared, page.read) == (20, 20)
    assert reads[-1] <= 3 * 20 + 20, f"a page of 20 examined {reads[-1]} rows"

    page = await store.purge_run_logs(SHARD, "app-a", CUT, 200, None)
    assert (page.cleared, page.read) == (0, 200)
    assert reads[-1] <= 3 * 200 + 20, f"a page of 200 from the start examined {reads[-1]} rows"
