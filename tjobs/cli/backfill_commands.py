"""``tjobs task backfill TASK_ID --from … --to … [--pace N] [--wait]``: run a task's schedule over a past
range as manual flows, as one server-side job (:mod:`tjobs.service.backfill`). The node counts the
range's instants when asked (a range without any, or with more than 100,000, is refused naming
``from``); ``--wait`` follows the job as ``tjobs dlq job ID --wait`` does (which also shows or cancels
it later)."""

from __future__ import annotations

from typing import Annotated

import typer

from tjobs.cli.api_commands import DEFAULT_URL, ApiKey, AsJson, Url, _ask, err
from tjobs.cli.dead_letter_commands import _follow


def task_backfill(
    task_id: Annotated[str, typer.Argument(help="the task's id")],
    from_: Annotated[str, typer.Option("--from", help="the range's start, included (ISO-8601 or ms)")],
    to: Annotated[str, typer.Option("--to", help="the range's end, excluded, not in the future (ISO-8601 or ms)")],
    pace: Annotated[
        int | None, typer.Option("--pace", help="flows started per second at most (1..1000; default 10)")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="follow the job until it ends")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Run the task's schedule over the past range [--from, --to) as manual flows, paced, as one server job.

    An instant that has a flow already (it fired, or an earlier backfill did it) is left as it is. A task
    whose pool forbids overlap gets one flow at a time. Cancel with tjobs dlq job ID --cancel.
    """
    job = _ask(url, api_key, "--api-key", lambda sdk: sdk.start_backfill(task_id, from_=from_, to=to, pace_per_s=pace))
    if not as_json:
        err().print(f"job {job.id} started: {job.total:,} instants at {job.params['pace_per_s']}/s")
    _follow(url, api_key, job, wait, as_json)


def add_task_backfill(group: typer.Typer) -> None:
    """Register ``backfill`` on ``tjobs task``."""
    group.command("backfill")(task_backfill)


__all__ = ["add_task_backfill"]
