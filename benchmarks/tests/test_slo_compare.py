"""The fire bench's --slo comparison: how many buckets apart the node's SLO p99 and the sink's p99 are."""

from __future__ import annotations

from benchmarks.slo_compare import compare


def report(p99_s: float | None, count: int = 100) -> dict[str, object]:
    return {"delivery_lateness": {"count": count, "p99_s": p99_s, "p99_label": "x", "at_send": {}}}


def test_the_sink_p99_inside_the_slo_bucket_is_zero_buckets_apart() -> None:
    assert compare(report(0.25), 180.0)["buckets_apart"] == 0
    assert compare(report(0.25), 250.0)["buckets_apart"] == 0  # on the bound: in the bucket


def test_an_slo_that_reads_better_than_the_sink_is_negative() -> None:
    assert compare(report(0.025), 705.0)["buckets_apart"] == -5  # the audit's 25 ms against 705 ms
    assert compare(report(None), 400_000.0)["buckets_apart"] == 0  # both past the last bound


def test_nothing_to_compare_without_attempts_or_a_sink_figure() -> None:
    assert compare(report(0.25, count=0), 180.0)["buckets_apart"] is None
    assert compare(report(0.25), None)["buckets_apart"] is None
