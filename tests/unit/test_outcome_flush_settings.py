"""``callbacks.outcome_flush_ms`` and ``callbacks.outcome_flush_batch``: how often, and in what groups, a
node writes its delivery outcomes (docs/configuration.md). Values out of range are refused at start,
naming the setting; the node's deliverer flushes by what was set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tjobs.node import Node
from tjobs.settings import Settings

MEMORY = {"urls": ["memory://"], "topology": "1x1x4"}


@pytest.mark.parametrize(
    ("key", "value"),
    [("outcome_flush_ms", 9), ("outcome_flush_ms", 5001), ("outcome_flush_batch", 0), ("outcome_flush_batch", 20_001)],
)
def test_an_outcome_flush_setting_out_of_range_is_refused_naming_it(key: str, value: int) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(storage=MEMORY, callbacks={key: value})
    assert key in str(refused.value)


def test_the_defaults_are_a_flush_every_100_ms_or_at_500_pending() -> None:
    callbacks = Settings(storage=MEMORY).callbacks
    assert (callbacks.outcome_flush_ms, callbacks.outcome_flush_batch) == (100, 500)


async def test_the_node_s_deliverer_flushes_by_the_settings() -> None:
    node = Node(Settings(storage=MEMORY, callbacks={"outcome_flush_ms": 250, "outcome_flush_batch": 42}))
    try:
        assert node.deliverer._outcomes.flush_interval_s == 0.25
        assert node.deliverer._outcomes.flush_batch == 42
    finally:
        await node.transport.close()
