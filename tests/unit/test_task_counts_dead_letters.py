"""An app's stats show a dead letter as soon as its flow is stored dead and drop it as soon as a redrive
is stored, whichever node wrote them: :meth:`TaskCounts.of` reads the app's dead flows at the request,
as it reads its task counts (a background pass once held a dead flow out of ``/v1/stats`` past ten
seconds on a busy database: test_stats_count_the_apps_tasks_fires_and_dead_letters[mariadb])."""

from __future__ import annotations

from sharding import Topology
from tests.delivery_fakes import APP, stored_flow
from tjobs.clock import ManualClock
from tjobs.model import FlowStatus
from tjobs.service.task_counts import TaskCounts
from tjobs.stores.memory import MemoryTaskStore


async def test_a_flow_stored_dead_is_in_the_stats_at_once_and_its_redrive_takes_it_out() -> None:
    store = MemoryTaskStore(Topology(2, 2, 4))
    counts = TaskCounts(store, ManualClock(1_000_000), refresh_s=3600.0)
    assert (await counts.of(APP.id)).dead_letters == 0

    task, flow = await stored_flow(store, status=FlowStatus.DEAD)
    await stored_flow(store, status=FlowStatus.DEAD)
    await stored_flow(store, status=FlowStatus.DELIVERED)
    now = await counts.of(APP.id)
    assert (now.dead_letters, now.completed) == (2, 3)  # its tasks too, from the counts

    assert await store.redrive_flow(task.id, flow.scheduled_at_ms, 1_000_000) is not None
    assert (await counts.of(APP.id)).dead_letters == 1
