"""The SLO's percentiles are histogram buckets, shown as buckets: the true quantile of a known
distribution is always inside the bucket the summary names (within one bucket), and the label says
"≤ bound", never a bound passed off as a measured value (issue 27)."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from tjobs.model import SLO_LATENESS_SLOTS
from tjobs.observability.metrics import LATENESS_BUCKETS_S
from tjobs.observability.slo import QUANTILES, bucketed_quantiles, lateness_summary


def histogram(samples: list[float]) -> list[int]:
    counts = [0] * SLO_LATENESS_SLOTS
    for value in samples:
        counts[bisect.bisect_left(LATENESS_BUCKETS_S, value)] += 1
    return counts


def true_quantile(samples: list[float], q: float) -> float:
    """Nearest rank: the ⌈q·n⌉-th smallest."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


DISTRIBUTIONS = {
    # the audit's quiet phase: p50/p90/p99 about 69/225/705 ms
    "lognormal, quiet": lambda rng: rng.lognormvariate(math.log(0.069), 1.0),
    # under load, with a heavy tail to several seconds
    "lognormal, loaded": lambda rng: rng.lognormvariate(math.log(0.108), 1.6),
    "uniform 0-3 s": lambda rng: rng.uniform(0.0, 3.0),
    "exponential, mean 40 ms": lambda rng: rng.expovariate(25.0),
    "on the bounds": lambda rng: rng.choice(LATENESS_BUCKETS_S),  # a value equal to a bound is in its bucket
}


@pytest.mark.parametrize("name", DISTRIBUTIONS)
@pytest.mark.parametrize("size", [7, 100, 1_000, 54_321])
def test_the_true_quantile_is_inside_the_bucket_shown(name: str, size: int) -> None:
    rng = random.Random(f"{name}/{size}")
    samples = [DISTRIBUTIONS[name](rng) for _ in range(size)]
    summary = bucketed_quantiles(histogram(samples))
    assert summary["count"] == size
    for q, key in QUANTILES:
        true = true_quantile(samples, q)
        upper, above = summary[f"{key}_s"], summary[f"{key}_above_s"]
        assert above < true, (key, true, summary)
        assert upper is None or true <= upper, (key, true, summary)
        if upper is not None:  # exactly the bucket holding it: its upper bound is the first bound >= true
            assert upper == LATENESS_BUCKETS_S[bisect.bisect_left(LATENESS_BUCKETS_S, true)], (key, true)


def test_labels_say_what_the_bucket_says() -> None:
    counts = histogram([0.069] * 50 + [0.2] * 40 + [0.7] * 9 + [400.0])  # 100 attempts, one past 300 s
    summary = bucketed_quantiles(counts)
    assert (summary["p50_label"], summary["p90_label"], summary["p99_label"]) == ("≤ 100 ms", "≤ 250 ms", "≤ 1 s")
    assert (summary["p50_above_s"], summary["p99_above_s"]) == (0.05, 0.5)
    beyond = bucketed_quantiles(histogram([400.0] * 10))
    assert (beyond["p99_s"], beyond["p99_above_s"], beyond["p99_label"]) == (None, 300.0, "> 300 s")
    empty = bucketed_quantiles([0] * SLO_LATENESS_SLOTS)
    assert (empty["count"], empty["p99_s"], empty["p99_label"]) == (0, None, None)
    assert lateness_summary(counts) == {"count": 100, "p50_s": 0.1, "p90_s": 0.25, "p99_s": 1.0}


def test_the_rank_is_exact_at_the_edge_of_a_bucket() -> None:
    # 99 of 100 on time, one late: the 99th smallest is on time, so the p99 is the first bucket ...
    assert bucketed_quantiles(histogram([0.001] * 99 + [2.0]))["p99_label"] == "≤ 5 ms"
    # ... and with one more late one, the 99th smallest is late
    assert bucketed_quantiles(histogram([0.001] * 98 + [2.0] * 2))["p99_label"] == "≤ 2.5 s"
