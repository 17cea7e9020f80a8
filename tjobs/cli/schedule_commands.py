"""``tjobs schedule preview``: the next instants of a schedule, as the server computes them.

Takes an app key (``--api-key``, ``TJOBS_API_KEY``) or the admin key (``--admin-key``,
``TJOBS_ADMIN_KEY``); the table shows each instant in UTC and in the schedule's zone (80 columns), and
with ``--jitter`` when it fires for the task ``--task-id`` names (0 by default). ``--calendar NAME``
skips what the app's calendar of that name excludes (an app key only: the admin has no calendars).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tjobs.cli.api_commands import (
    DEFAULT_URL,
    AdminKey,
    ApiKey,
    AsJson,
    CalendarName,
    Jitter,
    Url,
    _ask,
    _either_key,
    _emit,
    jittered_on_calendar,
    parse_duration_ms,
)
from tjobs.client import SchedulePreview, cron, delay, every, fixed_delay

schedule_app = typer.Typer(help="Schedules: preview the next instants of one.", no_args_is_help=True)


def _when(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds" if value.microsecond else "seconds").replace("+00:00", "Z")


def preview_table(preview: SchedulePreview) -> Table:
    """Each instant in UTC and in the schedule's zone; with jitter also when it fires (UTC)."""
    jittered = any(instant.fires_at is not None for instant in preview.instants)
    if not jittered:
        table = Table("#", "UTC", f"local ({preview.timezone})"[:34], title=None if not preview.ended else "(ends)")
    else:  # four columns in 80: no outer edges, instants never cut
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
        table.title = None if not preview.ended else "(ends)"
        table.add_column("#")
        table.add_column("UTC", no_wrap=True)
        table.add_column("fires at (UTC)", no_wrap=True)
        table.add_column(f"local ({preview.timezone})", overflow="fold", min_width=25)
    for number, instant in enumerate(preview.instants, 1):
        fires = [] if not jittered else [_when(instant.fires_at) if instant.fires_at else "-"]
        table.add_row(str(number), _when(instant.at), *fires, instant.local.isoformat(timespec="seconds"))
    return table


@schedule_app.command("preview")
def schedule_preview(
    cron_: Annotated[str | None, typer.Option("--cron", help="cron expression (5 or 6 fields)")] = None,
    every_: Annotated[str | None, typer.Option("--every", help="fixed rate (e.g. 30s)")] = None,
    at_: Annotated[str | None, typer.Option("--at", help="one instant: ISO-8601 or epoch ms")] = None,
    delay_: Annotated[str | None, typer.Option("--delay", help="once after this long (e.g. 30m)")] = None,
    fixed_delay_: Annotated[
        str | None, typer.Option("--fixed-delay", help="each run this long after the previous one ended (e.g. 30s)")
    ] = None,
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone for --cron")] = "UTC",
    dst_gap: Annotated[str, typer.Option("--dst-gap", help="skip|shift")] = "skip",
    dst_overlap: Annotated[str, typer.Option("--dst-overlap", help="once|twice")] = "once",
    start: Annotated[str | None, typer.Option("--start", help="start_at (ISO-8601 or epoch ms)")] = None,
    end: Annotated[str | None, typer.Option("--end", help="end_at (ISO-8601 or epoch ms)")] = None,
    max_fires: Annotated[int | None, typer.Option("--max-fires")] = None,
    jitter: Jitter = None,
    calendar: CalendarName = None,
    task_id: Annotated[
        str | None, typer.Option("--task-id", help="with --jitter: when this task fires (its id spreads it)")
    ] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="how many instants (1..100)")] = 10,
    from_: Annotated[str | None, typer.Option("--from", help="instants at or after this (ISO-8601 or ms)")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """The next instants of a schedule (DST policies applied), without registering anything."""
    schedule = _schedule(cron_, every_, at_, delay_, tz, dst_gap, dst_overlap, fixed_delay_)
    for name, value in (("start_at", start), ("end_at", end)):
        if value is not None:
            if name == "start_at" and schedule["kind"] not in ("cron", "interval", "fixed_delay"):
                raise typer.BadParameter("--start bounds --cron, --every and --fixed-delay only")
            if name == "end_at" and schedule["kind"] not in ("cron", "interval"):
                raise typer.BadParameter("--end bounds --cron and --every only")
            schedule.update(_instant(name, value))
    if max_fires is not None:
        schedule["max_fires"] = max_fires
    schedule = jittered_on_calendar(schedule, jitter, calendar)
    if task_id is not None and not task_id.isdigit():
        raise typer.BadParameter(f"{task_id!r} is not a task id", param_hint="--task-id")
    key = _either_key(api_key, admin_key)
    seed = None if task_id is None else int(task_id)
    preview = _ask(
        url, key, "--api-key", lambda sdk: sdk.preview_schedule(schedule, count=count, from_=_from(from_), task_id=seed)
    )
    _emit(preview, as_json, preview_table(preview))
    if preview.note is not None and not as_json:
        typer.echo(preview.note)


def _schedule(
    cron_: str | None,
    every_: str | None,
    at_: str | None,
    delay_: str | None,
    tz: str,
    dst_gap: str,
    dst_overlap: str,
    fixed_delay_: str | None = None,
) -> dict[str, Any]:
    given = [x for x in (cron_, every_, at_, delay_, fixed_delay_) if x is not None]
    if len(given) != 1:
        raise typer.BadParameter("give one of --cron, --every, --at, --delay, --fixed-delay")
    if fixed_delay_ is not None:
        return fixed_delay(ms=parse_duration_ms(fixed_delay_))
    if cron_ is not None:
        schedule = cron(cron_, timezone=tz)
        schedule.update(dst_gap=dst_gap, dst_overlap=dst_overlap)  # the server names a bad choice
        return schedule
    if every_ is not None:
        return every(ms=parse_duration_ms(every_))
    if delay_ is not None:
        return delay(ms=parse_duration_ms(delay_))
    assert at_ is not None
    return {"kind": "at", **_instant("at", at_)}


def _instant(name: str, text: str) -> dict[str, Any]:
    return {f"{name}_ms": int(text)} if text.isdigit() else {name: text}


def _from(text: str | None) -> str | int | None:
    return None if text is None else int(text) if text.isdigit() else text


__all__ = ["preview_table", "schedule_app"]
