"""``callbacks.queue_keep_min``: the deliveries an app's queue keeps in a node's memory at least, past which first
attempts are spilled to the store (docs/configuration.md, :mod:`tjobs.delivery.spill`). Out of range is refused at
start, naming the setting; the node's queues keep what was set, and its compensator takes spilled flows back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tjobs.node import Node
from tjobs.settings import Settings

MEMORY = {"urls": ["memory://"], "topology": "1x1x4"}


@pytest.mark.parametrize("value", [0, -1, 10_000_001])
def test_a_queue_keep_min_out_of_range_is_refused_naming_it(value: int) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(storage=MEMORY, callbacks={"queue_keep_min": value})
    assert "queue_keep_min" in str(refused.value)


def test_the_default_keeps_100000() -> None:
    assert Settings(storage=MEMORY).callbacks.queue_keep_min == 100_000


async def test_the_nodes_queues_keep_what_was_set_and_its_compensator_takes_spilled_flows_back() -> None:
    node = Node(Settings(storage=MEMORY, callbacks={"queue_keep_min": 7}))
    try:
        assert node.deliverer.lanes._keep_min == 7
        assert node.compensator._spill is node.deliverer.spill
    finally:
        await node.transport.close()
