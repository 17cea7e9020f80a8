"""Where a page says "now", the count is live: the overview's "Dead letters now" is the store's count at
the request, not the background task count's last pass (issue 27: 11 shown while 29 were listed)."""

from __future__ import annotations

import pytest

from testkit import RunningNode
from tests.api.conftest import Tenant
from tests.delivery_fakes import stored_flow
from tjobs.console.pages_overview import service_levels
from tjobs.model import FlowStatus

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_dead_letters_now_counts_the_dead_flows_stored_at_the_request(
    api_node: RunningNode, tenant: Tenant
) -> None:
    node = api_node.node
    await node.tasks.counts.refresh()  # the background count has just passed: no dead letter yet
    assert (await service_levels(node, tenant.app, "1h"))["dead_letters"] == 0

    # When three flows of the app go dead after that pass (and one of another app)
    for _ in range(3):
        await stored_flow(node.store, app=tenant.app, status=FlowStatus.DEAD)
    other = (await api_node.create_app("someone-else"))[0]
    await stored_flow(node.store, app=other, status=FlowStatus.DEAD)

    # Then the overview shows them at once, without waiting for the next pass
    assert (await service_levels(node, tenant.app, "1h"))["dead_letters"] == 3
    assert (await node.tasks.dead_letter_counts([tenant.app.id, other.id])) == {tenant.app.id: 3, other.id: 1}
