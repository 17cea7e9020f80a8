"""Instrumentation cost per fire: the metric calls one fire makes, timed in isolation.

    python -m tjobs.bench.metrics_overhead [--fires 200000] [--apps 20] [--batch 100]

One fire costs: ``observe_fire`` (counter + lateness histogram, children cached per app), its share
of the per-batch observations (transaction duration and batch size, once per ``--batch`` fires), one
callback attempt (``observe_attempt``) and one flow outcome (``observe_flow_update``),
as :class:`tjobs.node.Node` feeds them. The figure is CPU microseconds per fire; the loss of fire
throughput it implies is ``cost_us × fires_per_s_per_core / 1e6`` (e.g. 4 µs per fire costs 4 % at
10,000 fires/s on one core, 0.4 % at 1,000).
"""

from __future__ import annotations

import argparse
import time

from tjobs.metrics import Metrics


def per_fire_cost_us(fires: int, apps: int, batch: int) -> dict[str, float]:
    metrics = Metrics()
    names = [f"app-{i}" for i in range(apps)]
    costs: dict[str, float] = {}

    def timed(label: str, body: object) -> None:
        started = time.process_time()
        assert callable(body)
        body()
        costs[label] = (time.process_time() - started) / fires * 1e6

    def commit() -> None:
        for i in range(fires):
            metrics.observe_fire(names[i % apps], 0.012)
            if i % batch == 0:
                metrics.fire_tx_duration.observe(0.004)
                metrics.fire_tx_batch.observe(batch)

    def attempt() -> None:
        for i in range(fires):
            metrics.observe_attempt(names[i % apps], "delivered", 200, 0.003)

    def outcome() -> None:
        for i in range(fires):
            metrics.observe_flow_update(names[i % apps], "delivered", 0.02)

    def empty() -> None:
        for i in range(fires):
            names[i % apps]

    timed("loop", empty)
    timed("commit", commit)
    timed("attempt", attempt)
    timed("outcome", outcome)
    loop = costs.pop("loop")
    result = {k: v - loop for k, v in costs.items()}
    result["total"] = result["commit"] + result["attempt"] + result["outcome"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fires", type=int, default=200_000)
    parser.add_argument("--apps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    result = per_fire_cost_us(args.fires, args.apps, args.batch)
    for key, value in result.items():
        print(f"{key:16s} {value:6.2f} µs/fire")
    for rate in (1_000, 5_000, 10_000):
        print(f"throughput loss at {rate:>6,} fires/s per core: {result['total'] * rate / 1e4:5.2f} %")


if __name__ == "__main__":
    main()
