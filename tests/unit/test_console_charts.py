"""The overview's inline SVG charts (tjobs.console.charts): the figures are written out, gaps break the line."""

from __future__ import annotations

import re

from tjobs.console.charts import line_chart


def test_the_latest_and_highest_figures_are_written_out() -> None:
    chart = line_chart("Fires per minute", [3.0, 7.0, 5.0])

    assert (chart.latest, chart.peak) == ("5", "7")
    assert 'aria-label="Fires per minute: latest 5, highest 7"' in chart.svg
    assert "<title>Fires per minute</title>" in chart.svg


def test_a_missing_point_breaks_the_line_instead_of_dropping_to_zero() -> None:
    chart = line_chart("p99 lateness", [0.1, 0.2, None, 0.3, 0.4], unit=" s", digits=1)

    assert chart.svg.count("<polyline") == 2
    assert chart.latest == "0.4 s"


def test_a_lone_point_is_a_dot_and_no_data_is_a_dash() -> None:
    assert "<circle" in line_chart("one", [None, 2.0, None]).svg
    empty = line_chart("none", [None, None])

    assert (empty.latest, empty.peak) == ("—", "—")
    assert "<polyline" not in empty.svg


def test_the_highest_point_touches_the_top_and_zero_the_bottom() -> None:
    chart = line_chart("scale", [0.0, 10.0])

    points = re.search(r'points="([^"]+)"', chart.svg)
    assert points is not None
    (_, y0), (_, y1) = (map(float, p.split(",")) for p in points.group(1).split())
    assert y0 == 46.0 and y1 == 2.0


def test_titles_are_escaped() -> None:
    assert "<script>" not in line_chart("<script>", [1.0]).svg
