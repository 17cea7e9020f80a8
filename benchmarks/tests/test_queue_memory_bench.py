"""``benchmarks.queue_memory`` runs and reports what it says: every delivery but the one under way queued, and
the bytes the deliverer keeps for each apart from its task and flow; then spilled, and the bytes it keeps of each."""

from __future__ import annotations

import json

import pytest

from benchmarks import queue_memory


async def test_it_queues_all_but_the_attempt_under_way_and_counts_the_bytes_of_each() -> None:
    figures = await queue_memory.measure(200)
    assert (figures["deliveries"], figures["queued"]) == (200, 199)
    assert figures["task_and_flow_bytes"] > 0
    # a Delivery's own slots alone are over 100 B; a built message would add ~800 B more (the module doc)
    assert 100 < figures["bytes_per_queued_delivery"] < figures["task_and_flow_bytes"]
    # spilled: all but the one under way (a queue keeping one); its id, at least, is kept
    assert figures["spilled"] == 199
    assert 50 < figures["bytes_per_spilled_flow"] < figures["bytes_per_queued_delivery"]


def test_the_command_prints_the_figures_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    queue_memory.main(["--deliveries", "50", "--json"])
    assert json.loads(capsys.readouterr().out)["queued"] == 49


def test_too_few_deliveries_are_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        queue_memory.main(["--deliveries", "1"])
    assert "--deliveries" in capsys.readouterr().err
