"""``python -m benchmarks backfill_pace`` at tiny size on an embedded node: the backfill's every instant
arrives once while the other app's fires are all delivered, and the phases' figures are there."""

from __future__ import annotations

import pytest

from benchmarks.backfill_pace import backfill_range, bench, parser
from testkit.node_process import node_process


def test_the_range_holds_exactly_the_asked_whole_minutes_and_ends_in_the_past() -> None:
    now = 1_796_000_123_456
    from_ms, to_ms = backfill_range(now, 10_000)
    assert (to_ms - from_ms) == 10_000 * 60_000 and from_ms % 60_000 == 0
    assert now - 180_000 < to_ms <= now - 120_000


@pytest.mark.slow
async def test_a_tiny_backfill_sends_every_instant_once_beside_a_steady_load() -> None:
    # Given an embedded node, app A firing 40 a second, and app B's every-minute task
    args = parser().parse_args(
        ["--rate", "40", "--instants", "150", "--pace", "100", "--before-s", "2", "--after-s", "1", "--lead-s", "3"]
    )
    with node_process() as node:
        # When B backfills 150 minutes at 100 a second, 2 s into A's window
        summary = await bench(args, (node.base_url, node.admin_key, (node.pid,)), None)
    # Then each of the 150 instants reached the sink once, and the job counted them all
    backfill = summary["backfill"]
    assert (backfill["received"], backfill["missing"], backfill["duplicates"], backfill["outside_range"]) == (
        150,
        0,
        0,
        0,
    )
    assert (backfill["state"], backfill["processed"], backfill["failed"]) == ("done", 150, 0)
    assert summary["exactly_once"] is True
    # And A's every fire was delivered once, with its lateness before and during the backfill
    steady = summary["steady"]
    assert steady["missing"] == 0 and steady["duplicates"] == 0 and steady["delivered"] == steady["registered"]
    assert steady["lateness_ms"]["before"]["fires"] > 0 and steady["lateness_ms"]["during"]["fires"] > 0
