"""Metrics on versus off in one node, in alternating slices of one fire bench run.

Two node processes, one with metrics and one without, differ in more than their metrics: the
database's state, what else the machine runs meanwhile, where the heap lands. On this 2-core machine
that spread (±8 % in fires/s between identical runs) is larger than the thing measured. Here one node
switches ``node.observer.metrics`` between its live :class:`tjobs.observability.metrics.Metrics` and a
:class:`tjobs.observability.metrics.NullMetrics` every ``slice_s`` seconds, in the order on, off, off, on (so a
steady drift in the machine's load falls on both), while the fire bench offers more fires than it can
take. The node's fire-path observer (:class:`tjobs.observability.observer.MetricsObserver`) reads its
``metrics`` when it runs, so a slice runs exactly the code of a node with metrics on, or of one with
them off.

The node records each slice's wall-clock span, its own CPU time and the fires it committed meanwhile
(``RunnerStats.fires_committed``); the fires a slice delivered are the first callbacks the bench's
sink received during it (the fire bench's own measure of fires/s). Only slices during which the node
was behind (more fires due than received, by ``SATURATED_BACKLOG`` at the slice's end) count: there
the node's throughput, not the offered rate, decides how many fires a slice delivers (``--steady``:
every slice of the window, at a rate the node keeps up with). The comparison (:func:`compare`) fits
each arm's CPU to its commits and deliveries, since the mix of the two moves from slice to slice; a
``--control`` run, with no metrics in either arm, measures what the method reports on its own.

The child side is ``python -m benchmarks.metrics_slices --config FILE --slices OUT [--slice-s S]``
(run by :func:`testkit.node_process.node_process`); the driver is
``python -m benchmarks.metrics_overhead --interleaved``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import itertools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tjobs.observability.metrics import NullMetrics

SLICE_ORDER = (True, False, False, True)  # metrics on?  on, off, off, on, on, off, off, on, ...
SATURATED_BACKLOG = 1000  # fires due but not yet delivered at a slice's end for it to count


@dataclass(frozen=True, slots=True)
class Slice:
    position: int  # index in the run; SLICE_ORDER[position % 4] says the mode
    metrics_on: bool
    start_ms: int  # wall clock
    end_ms: int
    cpu_s: float  # the node process's CPU time (all threads) over the slice
    committed: int  # fires committed during the slice
    delivered: int = 0  # first callbacks the sink received during the slice (saturated_with_deliveries)


async def alternate_metrics(node: Any, slice_s: float, out: Path, control: bool = False) -> None:
    """Switch ``node.observer.metrics`` on and off in :data:`SLICE_ORDER`, one JSON line per slice to ``out``.
    ``control``: both arms are a :class:`NullMetrics` (two of them), so any difference the comparison
    then reports is the method's own."""
    live = NullMetrics() if control else node.observer.metrics
    if not control and not live.enabled:
        raise ValueError("the node must start with metrics.enabled = true")
    null = NullMetrics()
    with out.open("a", encoding="utf-8") as lines:
        for position in itertools.count():
            on = SLICE_ORDER[position % len(SLICE_ORDER)]
            node.observer.metrics = live if on else null
            start_ms, cpu_s = time.time_ns() // 1_000_000, time.process_time()
            committed = node.runner.stats.fires_committed
            await asyncio.sleep(slice_s)
            record = Slice(
                position=position,
                metrics_on=on,
                start_ms=start_ms,
                end_ms=time.time_ns() // 1_000_000,
                cpu_s=time.process_time() - cpu_s,
                committed=node.runner.stats.fires_committed - committed,
            )
            lines.write(json.dumps(asdict(record)) + "\n")
            lines.flush()


def read_slices(path: Path) -> list[Slice]:
    return [Slice(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def in_window_with_deliveries(
    slices: Iterable[Slice],
    first_receipts_us: Sequence[int],
    *,
    start_ms: int,
    window_s: float,
) -> list[Slice]:
    """For a steady run (offered rate below capacity, so commits and deliveries both follow it): the
    slices from 1 s into the window to its end, each with the first callbacks received during it."""
    end_ms = start_ms + window_s * 1000
    return [_counted(s, first_receipts_us) for s in slices if s.start_ms >= start_ms + 1000 and s.end_ms <= end_ms]


def _received(first_receipts_us: Sequence[int], ms: int) -> int:
    return bisect.bisect_left(first_receipts_us, ms * 1000)


def _counted(s: Slice, first_receipts_us: Sequence[int]) -> Slice:
    return dataclasses.replace(
        s, delivered=_received(first_receipts_us, s.end_ms) - _received(first_receipts_us, s.start_ms)
    )


def saturated_with_deliveries(
    slices: Iterable[Slice],
    first_receipts_us: Sequence[int],
    *,
    tasks: int,
    start_ms: int,
    window_s: float,
) -> list[Slice]:
    """The slices at whose end more than :data:`SATURATED_BACKLOG` fires were due but not yet received
    (the bench spreads ``tasks`` evenly over ``window_s`` from ``start_ms``), each with the first
    callbacks received during it (``first_receipts_us``: sorted, wall-clock µs)."""
    window_ms = window_s * 1000

    def due_by(ms: int) -> float:
        return tasks * min(max((ms - start_ms) / window_ms, 0.0), 1.0)

    return [
        _counted(s, first_receipts_us)
        for s in slices
        if due_by(s.end_ms) - _received(first_receipts_us, s.end_ms) > SATURATED_BACKLOG
    ]


def rates(slices: Sequence[Slice]) -> dict[str, Any]:
    """Pooled over ``slices``: delivered and committed fires per second, node CPU µs per delivered fire."""
    seconds = sum(s.end_ms - s.start_ms for s in slices) / 1000
    delivered = sum(s.delivered for s in slices)
    committed = sum(s.committed for s in slices)
    cpu_s = sum(s.cpu_s for s in slices)
    return {
        "slices": len(slices),
        "seconds": round(seconds, 2),
        "delivered_per_s": round(delivered / seconds, 1) if seconds else None,
        "committed_per_s": round(committed / seconds, 1) if seconds else None,
        "node_cpu_us_per_fire": round(cpu_s / delivered * 1e6, 1) if delivered else None,
    }


def fitted_cost_us(slices: Sequence[Slice]) -> dict[str, float] | None:
    """Node CPU per commit and per delivery, fitted over ``slices`` by least squares
    (``cpu ≈ commit_us × committed + delivery_us × delivered``), and their sum: the CPU one fire costs
    a saturated node. Within a run the mix moves (commits in bursts while fires are due, deliveries
    alone in the drain), so CPU per delivered fire of a set of slices depends on the commits that
    happened to fall into it; the fit does not. Background work (compensator, loads) is spread over
    both. ``None`` with too few or too uniform slices."""
    cc = sum(s.committed * s.committed for s in slices)
    dd = sum(s.delivered * s.delivered for s in slices)
    cd = sum(s.committed * s.delivered for s in slices)
    cy = sum(s.committed * s.cpu_s for s in slices)
    dy = sum(s.delivered * s.cpu_s for s in slices)
    determinant = cc * dd - cd * cd
    if len(slices) < 3 or determinant <= 1e-9 * cc * dd:
        return None
    commit_us = (cy * dd - dy * cd) / determinant * 1e6
    delivery_us = (dy * cc - cy * cd) / determinant * 1e6
    return {
        "commit_us": round(commit_us, 1),
        "delivery_us": round(delivery_us, 1),
        "fire_us": round(commit_us + delivery_us, 1),
        "fires_per_core_s": round(1e6 / (commit_us + delivery_us), 1),
    }


def loss_pct(on: dict[str, Any], off: dict[str, Any], key: str = "delivered_per_s") -> float | None:
    """How much lower ``key`` is with metrics on than off, in percent."""
    with_metrics, without = on.get(key), off.get(key)
    if not with_metrics or not without:
        return None
    return round((1 - float(with_metrics) / float(without)) * 100, 2)


def compare(slices: Sequence[Slice]) -> dict[str, Any]:
    """On versus off, pooled over ``slices`` (the saturated ones): fires/s and node CPU per fire of all
    on-slices against all off-slices, and the fitted CPU per fire (:func:`fitted_cost_us`) with the
    capacity of a core at that cost (``fitted_capacity_loss_pct``: the figure for a CPU-bound node).
    A/A: the comparison of fires/s between the two on-positions of the on-off-off-on order (first
    against last) and between the two off-positions; a run with ``--control`` (both arms without
    metrics) shows the same for every figure. A loss inside those is not a finding."""

    def at(*positions: int) -> dict[str, Any]:
        return rates([s for s in slices if s.position % len(SLICE_ORDER) in positions])

    on, off = at(0, 3), at(1, 2)
    fit_on = fitted_cost_us([s for s in slices if s.metrics_on])
    fit_off = fitted_cost_us([s for s in slices if not s.metrics_on])
    return {
        "on": on,
        "off": off,
        "throughput_loss_pct": loss_pct(on, off),
        "cpu_per_fire_increase_pct": loss_pct(off, on, "node_cpu_us_per_fire"),
        "fitted_on": fit_on,
        "fitted_off": fit_off,
        "fitted_capacity_loss_pct": loss_pct(fit_on, fit_off, "fires_per_core_s") if fit_on and fit_off else None,
        "aa_on_pct": loss_pct(at(0), at(3)),
        "aa_off_pct": loss_pct(at(1), at(2)),
    }


# ---- the child: a node that alternates ------------------------------------------------------------


def serve_alternating(config: Path, slices_out: Path, slice_s: float, control: bool) -> None:
    """``tjobs serve --config FILE`` plus :func:`alternate_metrics` once the node has started."""
    from tjobs.api.server import run, serve
    from tjobs.console import include_console
    from tjobs.observability.logs import configure_logging
    from tjobs.settings import load_settings

    configure_logging()
    background: set[asyncio.Task[None]] = set()

    async def after_start(node: Any) -> None:
        task = asyncio.create_task(alternate_metrics(node, slice_s, slices_out, control), name="metrics-slices")
        background.add(task)

    run(serve(load_settings(config), after_start=after_start, mount=include_console))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--slices", type=Path, required=True, help="JSON lines, one per slice")
    parser.add_argument("--slice-s", type=float, default=1.0)
    parser.add_argument("--control", action="store_true", help="both arms without metrics (A/A)")
    args = parser.parse_args()
    serve_alternating(args.config, args.slices, args.slice_s, args.control)


if __name__ == "__main__":
    main()
