"""The overview's inline SVG charts (tjobs.console.charts): the figures are written out, gaps break the line."""

from __future__ import annotations

import re

from tjobs.console.charts import TimeAxis, line_chart


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


def test_a_chart_with_instants_has_a_time_axis_in_utc_and_a_value_axis() -> None:
    # 12 buckets of 5 min from 2026-05-01 09:00 UTC: the first, middle and last bucket's start are labelled
    axis = TimeAxis(start_ms=1_777_626_000_000, step_ms=300_000)
    chart = line_chart("Fires per minute", [float(n) for n in range(12)], axis=axis)

    labels = re.findall(r"<text[^>]*>([^<]+)</text>", chart.svg)
    assert labels == ["11", "0", "09:00", "09:25", "09:55", "UTC"]
    assert 'aria-label="Fires per minute: latest 11, highest 11, from 09:00 to 09:55 UTC"' in chart.svg
    points = re.search(r'points="([^"]+)"', chart.svg)
    assert points is not None and points.group(1).startswith("2.0,46.0 ")  # the plot did not move


def test_a_time_axis_over_days_names_the_date() -> None:
    axis = TimeAxis(start_ms=1_777_626_000_000, step_ms=6 * 3_600_000)
    chart = line_chart("Dead flows", [0.0] * 28, axis=axis)

    assert "05-01 09:00" in chart.svg and "05-08 03:00" in chart.svg
