"""``tjobs dlq``: the app's dead letters, newest first and filtered, and their redrive: by id, every one
client-side (``--all``), or every one matching the filters as one server-side job (``--all-matching``:
the count is shown and confirmed, then the node runs the job in batches; ``--wait`` follows it), and
the jobs (``tjobs dlq job ID``, ``--cancel``)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from datetime import UTC
from typing import Annotated, Any

import typer
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, ApiKey, AsJson, Url, _ask, _emit, _flows_table, err, out
from tjobs.client import Client, OperatorJob, RedriveResult

dlq_app = typer.Typer(
    help="Dead letters: list, redrive (by id, all, or all matching as a server job), jobs.", no_args_is_help=True
)

WAIT_POLL_S = 1.0

TaskName = Annotated[str | None, typer.Option("--task-name", help="tasks whose name starts with this")]
TaskId = Annotated[str | None, typer.Option("--task", help="one task's")]
Target = Annotated[str | None, typer.Option("--target", help="tasks whose callback names this target")]
LastAnswer = Annotated[str | None, typer.Option("--last-answer", help="none, a class (5xx) or a code (503)")]
Window = Annotated[str | None, typer.Option("--window", help="scheduled in the last 15m, 1h, 24h or 7d")]
From = Annotated[str | None, typer.Option("--from", help="scheduled at or after (ISO-8601 or ms)")]
To = Annotated[str | None, typer.Option("--to", help="scheduled before (ISO-8601 or ms)")]

# (parameter, the SDK's filter, its option): the filters of ``dlq list`` and ``dlq redrive --all-matching``
FILTER_OPTIONS: list[tuple[str, str, Any]] = [
    ("task_name", "task_name_prefix", TaskName),
    ("task", "task_id", TaskId),
    ("target", "target", Target),
    ("last_answer", "last_answer", LastAnswer),
    ("window", "window", Window),
    ("from_", "from_", From),
    ("to", "to", To),
]


def with_filters(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the :data:`FILTER_OPTIONS` among its options (before ``--url``): it is called with
    ``filters``, the SDK's filters that were given, in their place."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "filters"]
    at = next(i for i, p in enumerate(own) if p.name == "url")
    options = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a) for n, _, a in FILTER_OPTIONS
    ]
    keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]

    @functools.wraps(command)
    def with_given(**given: Any) -> None:
        filters = {sdk_name: given.pop(name) for name, sdk_name, _ in FILTER_OPTIONS}
        command(filters={name: value for name, value in filters.items() if value is not None}, **given)

    with_given.__signature__ = inspect.Signature([*keyword[:at], *options, *keyword[at:]])  # type: ignore[attr-defined]
    return with_given


@dlq_app.command("list")
@with_filters
def dlq_list(
    filters: dict[str, Any],
    limit: Annotated[int, typer.Option("--limit")] = 50,
    all_: Annotated[bool, typer.Option("--all", help="every page")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """The app's dead letters, newest first across every shard."""

    def listed(sdk: Client) -> Any:
        return list(sdk.iter_dead_letters(**filters)) if all_ else sdk.dead_letters(limit=limit, **filters).items

    flows = _ask(url, api_key, "--api-key", listed)
    _emit(flows, as_json, _flows_table(flows))


@dlq_app.command("redrive")
@with_filters
def dlq_redrive(
    filters: dict[str, Any],
    flow_ids: Annotated[list[str] | None, typer.Argument(help="flow ids")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every dead letter, from this client, 1,000 per call")] = False,
    all_matching: Annotated[
        bool, typer.Option("--all-matching", help="every dead letter matching the filters, as one server-side job")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="start the job without asking to confirm the count")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="follow the job until it ends")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Send dead flows again (attempts kept): the ids given, --all, or --all-matching the filters."""
    if all_matching:
        if flow_ids or all_:
            raise typer.BadParameter("--all-matching takes filters, not flow ids or --all")
        _redrive_all_matching(url, api_key, filters, yes, wait, as_json)
        return
    if filters:
        raise typer.BadParameter("filters go with --all-matching")
    if not flow_ids and not all_:
        raise typer.BadParameter("give flow ids, --all or --all-matching")

    def redriven(sdk: Client) -> list[RedriveResult]:
        ids = [f.id for f in sdk.iter_dead_letters()] if all_ else list(flow_ids or [])
        return [sdk.redrive(ids[i : i + 1000]) for i in range(0, len(ids), 1000)]

    results = _ask(url, api_key, "--api-key", redriven)
    items = [item for result in results for item in result.items]
    if as_json:
        _emit(
            {
                "redriven": sum(r.redriven for r in results),
                "failed": sum(r.failed for r in results),
                "items": [i.model_dump(mode="json") for i in items],
            },
            True,
        )
        return
    table = Table("flow id", "status", "error")
    for item in items:
        table.add_row(item.flow_id, str(item.status), item.error.message if item.error else "")
    out().print(table)


def _redrive_all_matching(
    url: str, api_key: str | None, filters: dict[str, Any], yes: bool, wait: bool, as_json: bool
) -> None:
    count = _ask(url, api_key, "--api-key", lambda sdk: sdk.count_dead_letters(**filters))
    if count.matched == 0:
        err().print("no dead letter matches these filters")
        raise typer.Exit(1)
    what = f"the newest {count.matched:,} (more match)" if count.more else f"{count.matched:,}"
    dead_before = count.dead_before.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if not yes and not typer.confirm(f"Redrive {what} dead letters, dead before {dead_before} UTC?"):
        raise typer.Exit(1)
    job = _ask(
        url,
        api_key,
        "--api-key",
        lambda sdk: sdk.start_redrive_job(count.matched, dead_before=count.dead_before_ms, **filters),
    )
    if not as_json:
        err().print(f"job {job.id} started: {job.total:,} dead letters")
    _follow(url, api_key, job, wait, as_json)


@dlq_app.command("job")
def dlq_job(
    job_id: Annotated[str, typer.Argument(help="the job's id (job_...)")],
    cancel: Annotated[bool, typer.Option("--cancel", help="ask it to stop after its batch in progress")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="follow it until it ends")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """One operator job's progress (a redrive's, or a backfill's: processed of total, failures), or --cancel it."""
    job = _ask(
        url,
        api_key,
        "--api-key",
        lambda sdk: sdk.cancel_operator_job(job_id) if cancel else sdk.get_operator_job(job_id),
    )
    _follow(url, api_key, job, wait, as_json)


@dlq_app.command("jobs")
def dlq_jobs(
    limit: Annotated[int, typer.Option("--limit", help="1..100")] = 20,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """The app's redrive jobs, newest first."""
    jobs = _ask(url, api_key, "--api-key", lambda sdk: sdk.list_operator_jobs(limit=limit))
    table = Table("job", "state", "processed", "failed", "started (UTC)")
    for job in jobs:
        started = job.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(job.id, job.state, f"{job.processed:,}/{job.total:,}", str(job.failed), started)
    _emit(jobs, as_json, table)


def _follow(url: str, api_key: str | None, job: OperatorJob, wait: bool, as_json: bool) -> None:
    """Print ``job``; with ``wait``, its progress until it ends (a failed or cancelled end exits 1)."""
    job_id = job.id
    while wait and not job.finished:
        if not as_json:
            err().print(f"{job.state}: {job.processed:,} of {job.total:,} processed, {job.failed:,} failed")
        time.sleep(WAIT_POLL_S)
        job = _ask(url, api_key, "--api-key", lambda sdk: sdk.get_operator_job(job_id))
    _emit(job, as_json, _job_table(job))
    if wait and job.state != "done":
        raise typer.Exit(1)


def _job_table(job: OperatorJob) -> Table:
    table = Table("job", "state", "processed", "failed", "node")
    table.add_row(job.id, job.state, f"{job.processed:,}/{job.total:,}", str(job.failed), job.node or "-")
    for error in job.errors:
        table.add_row("", "failed", "", error, "")
    return table
