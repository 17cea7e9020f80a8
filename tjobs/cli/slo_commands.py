"""``tjobs slo``: service levels, the cluster's over a window (the same on every node) or this node's."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, AdminKey, ApiKey, AsJson, Url, _ask, _either_key, _emit, out


def _bucket(value: Any) -> str:
    """A quantile's bucket label (``≤ 250 ms``): the histogram knows it to the bucket, no closer."""
    return "-" if value is None else str(value)


def slo_table(report: dict[str, Any]) -> Table:
    table = Table("figure", "value", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    lateness, commit, reach = report["delivery_lateness"], report["commit_lateness"], report["reach"]
    ratio = "-" if reach["ratio"] is None else f"{reach['ratio']:.4%}"
    rows = [
        ("app", str(report["app_id"] or "every app")),
        ("window", f"{report['window']} ({report['from']} .. {report['to']})"),
        ("fires", str(report["fires"])),
        ("delivery lateness p50 / p99", f"{_bucket(lateness['p50_label'])} / {_bucket(lateness['p99_label'])}"),
        ("  (first attempts, at the answer)", f"{lateness['count']} attempts"),
        ("p99 objective met", "yes" if lateness["met"] else "NO"),
        ("commit lateness p50 / p99", f"{_bucket(commit['p50_label'])} / {_bucket(commit['p99_label'])}"),
        ("reach", f"{ratio} ({reach['delivered']} delivered, {reach['dead']} dead)"),
        ("reach objective met", "yes" if reach["met"] else "NO"),
        ("misses", str(report["misses"])),
        ("throttled", str(report["throttled"])),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def slo(
    window: Annotated[str, typer.Option("--window", "-w", help="5m, 1h, 1d or 7d")] = "1h",
    app_id: Annotated[str | None, typer.Option("--app", help="admin: one app (default: every app)")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """The cluster's service levels over a window: first-attempt delivery lateness (commit lateness
    beside it), reach, misses, throttled, dead."""
    report = _ask(url, _either_key(api_key, admin_key), "--api-key", lambda sdk: sdk.slo(window, app_id=app_id))
    if as_json:
        _emit(report, True)
    else:
        out().print(slo_table(report))
