"""Small inline SVG time-series charts for the overview: pure, no script, readable without colour.

A chart is a line over evenly spaced points (one per minute, say), with its title, the newest and the
highest value written out beside it: the numbers never depend on seeing the line. Missing points
(``None``) break the line instead of being drawn as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH = 240
HEIGHT = 48
PAD = 2


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    svg: Markup
    latest: str
    peak: str


def line_chart(title: str, values: Sequence[float | None], unit: str = "", digits: int = 0) -> Chart:
    """A chart of ``values`` (oldest first). ``unit`` and ``digits`` format the figures shown beside it."""
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
    label = escape(f"{title}: latest {latest}, highest {peak}")
    svg = Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{label}"><title>{escape(title)}</title>{base}{lines}{dots}</svg>'
    )
    return Chart(title, svg, latest, peak)
