"""Small inline SVG time-series charts for the overview: pure, no script, readable without colour.

A chart is a line over evenly spaced points (one per minute, say), with its title, the newest and the
highest value written out beside it: the numbers never depend on seeing the line. Missing points
(``None``) break the line instead of being drawn as zero.

Given the points' time (:class:`TimeAxis`: the first point's instant and the step, each point a
bucket labelled by its start), the chart has a time axis below the line, in UTC (the axis says so):
the first, middle and last point's time, as ``HH:MM`` or, over a day or more, ``MM-DD HH:MM``; and a
value axis at its left (0 and the highest value). The plot keeps its size and place either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH = 240
HEIGHT = 48
PAD = 2
LEFT_AXIS = 40  # room left of the plot for the value axis's labels
BOTTOM_AXIS = 28  # room below the plot for the time axis's labels and its "UTC"
LABEL_SIZE = 10
MS_PER_DAY = 86_400_000


@dataclass(frozen=True, slots=True)
class TimeAxis:
    """The points' instants: the first point's bucket starts at ``start_ms`` (epoch ms), each ``step_ms`` on."""

    start_ms: int
    step_ms: int

    def label(self, index: int, span_ms: int) -> str:
        moment = datetime.fromtimestamp((self.start_ms + index * self.step_ms) / 1000, UTC)
        return moment.strftime("%m-%d %H:%M" if span_ms >= MS_PER_DAY else "%H:%M")


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    svg: Markup
    latest: str
    peak: str


def line_chart(
    title: str, values: Sequence[float | None], unit: str = "", digits: int = 0, axis: TimeAxis | None = None
) -> Chart:
    """A chart of ``values`` (oldest first). ``unit`` and ``digits`` format the figures shown beside it;
    ``axis`` gives the points' instants (a time axis and a value axis are drawn)."""
    known = [v for v in values if v is not None]
    top = max(known, default=0.0) or 1.0
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    segments: list[list[str]] = [[]]
    for index, value in enumerate(values):
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        x = PAD + index * step
        y = HEIGHT - PAD - (value / top) * (HEIGHT - 2 * PAD)
        segments[-1].append(f"{x:.1f},{y:.1f}")
    lines = "".join(
        f'<polyline points="{" ".join(points)}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
        for points in segments
        if len(points) > 1
    )
    dots = "".join(
        f'<circle cx="{points[0].split(",")[0]}" cy="{points[0].split(",")[1]}" r="1.5" fill="currentColor"/>'
        for points in segments
        if len(points) == 1
    )
    floor = HEIGHT - PAD
    base = f'<line x1="{PAD}" y1="{floor}" x2="{WIDTH - PAD}" y2="{floor}" stroke="currentColor" stroke-opacity="0.3"/>'

    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.{digits}f}{unit}"

    latest = figure(next((v for v in reversed(values) if v is not None), None))
    peak = figure(max(known, default=None))
    described = f"{title}: latest {latest}, highest {peak}"
    box, axes = f"0 0 {WIDTH} {HEIGHT}", ""
    width, height = WIDTH, HEIGHT
    if axis is not None and values:
        span_ms = len(values) * axis.step_ms
        first, last = axis.label(0, span_ms), axis.label(len(values) - 1, span_ms)
        described += f", from {first} to {last} UTC"
        axes = _axes(axis, len(values), step, figure(top if known else None))
        width, height = WIDTH + LEFT_AXIS, HEIGHT + BOTTOM_AXIS
        box = f"{-LEFT_AXIS} 0 {width} {height}"
    svg = Markup(
        f'<svg class="chart" viewBox="{box}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(described)}"><title>{escape(title)}</title>{base}{axes}{lines}{dots}</svg>'
    )
    return Chart(title, svg, latest, peak)


def _axes(axis: TimeAxis, count: int, step: float, top: str) -> str:
    """The value axis (0 at the floor, ``top`` at the top) and the time axis (first, middle and last
    point, each with a tick), in SVG drawn in ``currentColor``."""
    span_ms = count * axis.step_ms
    text = f'font-size="{LABEL_SIZE}" fill="currentColor"'
    floor = HEIGHT - PAD
    parts = [
        f'<text x="-3" y="{PAD + LABEL_SIZE - 1}" text-anchor="end" {text}>{escape(top)}</text>',
        f'<text x="-3" y="{floor}" text-anchor="end" {text}>0</text>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{WIDTH - PAD}" y2="{PAD}" stroke="currentColor" stroke-opacity="0.15"/>',
    ]
    ticks = sorted({0, (count - 1) // 2, count - 1})
    for index in ticks:
        x = PAD + index * step
        anchor = "start" if index == 0 and count > 1 else "end" if index == count - 1 and count > 1 else "middle"
        parts.append(f'<line x1="{x:.1f}" y1="{floor}" x2="{x:.1f}" y2="{floor + 3}" stroke="currentColor"/>')
        label = escape(axis.label(index, span_ms))
        parts.append(f'<text x="{x:.1f}" y="{floor + 3 + LABEL_SIZE}" text-anchor="{anchor}" {text}>{label}</text>')
    parts.append(f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT + BOTTOM_AXIS - 2}" text-anchor="middle" {text}>UTC</text>')
    return "".join(parts)
