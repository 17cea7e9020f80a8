"""``tjobs flows search`` and ``tjobs task search`` (the searches across shards), ``tjobs flows show``
(one flow's attempts and run) and ``tjobs flows cancel`` (a running run), in tables that fit 80 columns.

Instants show in UTC to the second (``2026-11-25 17:53:08``), never cut; ids are never cut either
(they are copied into the next command). ``--all`` walks every page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tjobs.cli.api_commands import (
    DEFAULT_URL,
    ApiKey,
    AsJson,
    Health,
    Url,
    _ask,
    _ask_pages,
    _emit,
    out,
    tasks_table,
)
from tjobs.client import Client, Flow, FlowRun, Page, Task

flows_app = typer.Typer(
    help="Flows: search them across every shard, show one with its attempts and run, cancel a run.",
    no_args_is_help=True,
)

Limit = Annotated[int, typer.Option("--limit", help="items per page (1..1000)")]
All = Annotated[bool, typer.Option("--all", help="every page")]


def _compact(*columns: str) -> Table:
    return Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)


def flow_search_table(flows: Sequence[Flow]) -> Table:
    """scheduled (UTC), status, attempts, last answer (status code or error), flow id: 80 columns."""
    table = _compact("scheduled (UTC)", "status", "att", "last")
    table.add_column("flow id", no_wrap=True, min_width=33)
    for flow in flows:
        at = flow.scheduled_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        last = str(flow.last_status_code) if flow.last_status_code else (flow.last_error or "-")
        table.add_row(at, flow.status, str(flow.attempts), last[:12], flow.id)
    return table


def task_search_table(tasks: Sequence[Task]) -> Table:
    """name, status, kind, next run (UTC), id: 80 columns."""
    table = _compact("name", "status", "kind", "next run (UTC)")
    table.add_column("id", no_wrap=True, min_width=19)
    for task in tasks:
        next_run = task.next_run_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if task.next_run_at else "-"
        table.add_row(task.name, task.status, str(task.schedule.get("kind", "")), next_run, task.id)
    return table


@flows_app.command("search")
def flows_search(
    status: Annotated[str | None, typer.Option("--status", help="pending|retrying|delivered|dead|...")] = None,
    task: Annotated[str | None, typer.Option("--task", help="one task's flows")] = None,
    from_: Annotated[str | None, typer.Option("--from", help="scheduled at or after (ISO-8601 or ms)")] = None,
    to: Annotated[str | None, typer.Option("--to", help="scheduled before (ISO-8601 or ms)")] = None,
    task_name: Annotated[str | None, typer.Option("--task-name", help="tasks whose name starts with this")] = None,
    target: Annotated[str | None, typer.Option("--target", help="tasks whose callback names this target")] = None,
    last_answer: Annotated[str | None, typer.Option("--last-answer", help="none, a class (5xx) or a code")] = None,
    window: Annotated[str | None, typer.Option("--window", help="scheduled in the last 15m, 1h, 24h or 7d")] = None,
    limit: Limit = 50,
    all_: All = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """The app's flows across every shard, newest first."""
    filters = {"task_name_prefix": task_name, "target": target, "last_answer": last_answer, "window": window}

    def page(sdk: Client, cursor: str | None) -> Page[Flow]:
        return sdk.search_flows(status=status, task_id=task, from_=from_, to=to, limit=limit, cursor=cursor, **filters)

    flows = _ask_pages(url, api_key, "--api-key", all_, page)
    _emit(flows, as_json, flow_search_table(flows))


@flows_app.command("show")
def flows_show(
    flow_id: Annotated[str, typer.Argument(help="the flow id (<task id>-<scheduled at ms>)")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """One flow and every attempt it kept (the newest 25), oldest first."""
    flow = _ask(url, api_key, "--api-key", lambda sdk: sdk.get_flow(flow_id))
    _emit(flow, as_json, flow_attempts_table(flow))


def flow_attempts_table(flow: Flow) -> Table:
    """#, at (UTC, ms), took, answer (status code or 'none'), late (ms after scheduled), error and
    destination folded: 80 columns."""
    shown = len(flow.attempt_history)
    kept = f" (the last {shown} of {flow.attempt_total})" if flow.attempt_total > shown else ""
    table = _compact("#", "at (UTC)", "took", "answer", "late")
    table.title = f"flow {flow.id}: {flow.status}, {flow.attempts} attempts{kept}"
    if flow.run is not None:
        table.caption = Text(run_line(flow.run, flow.log_lines, purged=flow.log_purged))  # [..] is no markup
    table.add_column("error / destination", overflow="fold")
    for a in flow.attempt_history:
        at = a.started_at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
        where = a.destination + (f" ({a.executor})" if a.executor else "")
        detail = f"{a.error}\n{where}" if a.error else where
        answer = "none" if a.status_code is None else str(a.status_code)
        table.add_row(str(a.attempt), at, f"{a.duration_ms}ms", answer, f"{a.lateness_ms}ms", detail)
    return table


RESULT_CHARS = 60  # a run's result is shown as compact JSON, cut to this many characters


def run_line(run: FlowRun, log_lines: int | None = None, *, purged: bool = False) -> str:
    """A run in one line: its status, attempt, progress, message, the number of log lines (when known:
    ``flows show`` knows them, a cancel's answer does not; ``purged``: the app's run log retention cleared
    them) and its result (compact JSON, shortened to ``RESULT_CHARS`` with ``…``; ``tjobs flows show
    --json`` gives it whole)."""
    progress = f", {run.progress}%" if isinstance(run.progress, int) else (f", {run.progress}" if run.progress else "")
    cancel = ", cancel asked" if run.cancel_requested and run.status == "cancelling" else ""
    message = f": {run.message}" if run.message else ""
    logged = "" if log_lines is None else f"; {log_lines} log line{'' if log_lines == 1 else 's'}"
    if purged:
        logged += ", purged by the app's log retention"
    result = "" if run.result is None else f"; result {_shortened(run.result)}"
    return f"run (attempt {run.attempt}): {run.status}{progress}{cancel}{message}{logged}{result}"


def _shortened(value: object) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= RESULT_CHARS else text[: RESULT_CHARS - 1] + "…"


@flows_app.command("cancel")
def flows_cancel(
    flow_id: Annotated[str, typer.Argument(help="the flow id (<task id>-<scheduled at ms>)")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Ask a flow's running run to stop (its executor is told in the answer to its next report)."""
    answer = _ask(url, api_key, "--api-key", lambda sdk: sdk.cancel_run(flow_id))
    if as_json:
        _emit(answer, as_json)
    else:
        out().print(f"flow {answer.flow_id}: {answer.status}; {run_line(answer.run)}", markup=False)


def task_search(
    prefix: Annotated[str | None, typer.Option("--prefix", help="name prefix (orders by name)")] = None,
    status: Annotated[str | None, typer.Option("--status", help="active|paused|completed")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="cron|interval|at|delay|fixed_delay")] = None,
    key: Annotated[str | None, typer.Option("--key", help="the idempotency key")] = None,
    limit: Limit = 50,
    all_: All = False,
    health: Health = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """The app's tasks across every shard: newest first, or by name with --prefix."""

    def page(sdk: Client, cursor: str | None) -> Page[Task]:
        filters = {"status": status, "kind": kind, "name_prefix": prefix, "key": key}
        return sdk.list_tasks(limit=limit, cursor=cursor, health=health, **filters)

    tasks = _ask_pages(url, api_key, "--api-key", all_, page)
    _emit(tasks, as_json, tasks_table(tasks, True) if health else task_search_table(tasks))


def add_task_search(group: typer.Typer) -> None:
    """Register ``search`` on ``tjobs task``."""
    group.command("search")(task_search)


__all__ = ["add_task_search", "flow_attempts_table", "flow_search_table", "flows_app", "run_line", "task_search_table"]
