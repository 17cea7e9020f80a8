"""``tjobs task|app``: the API from a terminal, on the SDK; rich tables or ``--json``. Its client, option
and output helpers serve the other command modules too.

Where and who: ``--url`` (``TJOBS_URL``, default ``http://127.0.0.1:8080``), ``--api-key``
(``TJOBS_API_KEY``) for task and import commands, ``--admin-key`` (``TJOBS_ADMIN_KEY``) for app
management. Durations are ``1500ms``, ``30s``, ``5m``, ``2h`` or ``1d``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tjobs.client import ApiError, Client, Flow, Page, Task, TjobsClientError, at, cron, delay, every, fixed_delay

task_app = typer.Typer(
    help="Tasks: create, get, list, update, pause, resume, trigger, delete, flows.", no_args_is_help=True
)
app_app = typer.Typer(
    help="Apps (admin key): list, create, show, update, rotate, disable, enable, delete.",
    no_args_is_help=True,
)


def out() -> Console:
    """Standard output's console, as this run sees the terminal (``COLUMNS`` included): made per use, so
    the width is never the one of the run that first imported this module."""
    return Console()


def err() -> Console:
    """Standard error's console, as :func:`out`."""
    return Console(stderr=True)


Url = Annotated[str, typer.Option("--url", envvar="TJOBS_URL", help="API base URL")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="TJOBS_API_KEY", help="the app's API key")]
AdminKey = Annotated[str | None, typer.Option("--admin-key", envvar="TJOBS_ADMIN_KEY", help="the admin key")]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]
DEFAULT_URL = "http://127.0.0.1:8080"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
T = TypeVar("T")


def parse_duration_ms(text: str, flag: str | None = None) -> int:
    """``1500ms``, ``30s``, ``5m``, ``2h``, ``1d`` in milliseconds; a usage error (naming ``flag``) otherwise."""
    match = _DURATION.match(text.strip())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration like 1500ms, 30s, 5m, 2h or 1d", param_hint=flag)
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


def jittered_on_calendar(schedule: dict[str, Any], jitter: str | None, calendar: str | None) -> dict[str, Any]:
    """``schedule`` with ``--jitter`` as its ``jitter_ms`` and ``--calendar`` as its ``calendar``, when given
    (the API judges them against the schedule: its period, its kind, the app's calendars)."""
    given = {
        **({} if jitter is None else {"jitter_ms": parse_duration_ms(jitter, "--jitter")}),
        **({} if calendar is None else {"calendar": calendar}),
    }
    return {**schedule, **given}


def cli_client(url: str, authorization: str) -> Client:
    """The SDK client every command speaks through, sending ``authorization`` (``Bearer <key>`` or
    ``Basic ...``) and ``X-Tjobs-Client: cli``: the audit log records the CLI's changes as via ``cli``."""
    return Client(url, headers={"authorization": authorization, "x-tjobs-client": "cli"})


def _client(url: str, key: str | None, what: str) -> Client:
    if not key:
        raise typer.BadParameter(f"give {what} (or set its environment variable)")
    return cli_client(url, f"Bearer {key}")


def _given(**fields: Any) -> dict[str, Any]:
    """The API fields a command's flags gave (those not ``None``), by their API names."""
    return {name: value for name, value in fields.items() if value is not None}


def _either_key(api_key: str | None, admin_key: str | None) -> str:
    """The app key, else the admin key, for the commands either may run."""
    key = api_key or admin_key
    if not key:
        raise typer.BadParameter("give --api-key or --admin-key (or set its environment variable)")
    return key


def _ask(url: str, key: str | None, what: str, operation: Callable[[Client], T]) -> T:
    """What ``operation`` gets from the API at ``url`` with ``key`` (``what`` names its flag); an error
    it answers (or no answer) ends the command with the error printed."""
    return answer(_client(url, key, what), operation)


def answer(client: Client, operation: Callable[[Client], T]) -> T:
    """What ``operation`` gets from the API through ``client`` (closed after); an error it answers (or no
    answer) ends the command with the error printed (exit 1)."""
    with client as sdk:
        try:
            return operation(sdk)
        except TjobsClientError as error:
            raise _fail(error) from None


def _ask_update(url: str, key: str | None, fields: dict[str, Any], update: Callable[[Client], T]) -> T:
    """As :func:`_ask` with ``--api-key``, an update of ``fields``: refused before any call when the
    command's flags gave none."""
    if not fields:
        raise typer.BadParameter("nothing to change")
    return _ask(url, key, "--api-key", update)


def _ask_pages(
    url: str, key: str | None, what: str, every_page: bool, page_at: Callable[[Client, str | None], Page[T]]
) -> list[T]:
    """As :func:`_ask`, the items of the first page (``page_at(sdk, None)``), or with ``every_page``
    those of every page, cursor by cursor."""

    def collect(sdk: Client) -> list[T]:
        page = page_at(sdk, None)
        items = list(page.items)
        while every_page and page.next_cursor is not None:
            page = page_at(sdk, page.next_cursor)
            items += page.items
        return items

    return _ask(url, key, what, collect)


def _fail(error: TjobsClientError) -> typer.Exit:
    if isinstance(error, ApiError):
        where = escape(f" [{error.field}]") if error.field else ""  # rich would take [field] for markup
        err().print(f"[bold red]error {error.status} {error.code}{where}:[/] {escape(error.message)}")
    else:
        err().print(f"[bold red]error:[/] {escape(str(error))}")
    return typer.Exit(1)


def _emit(value: BaseModel | Sequence[BaseModel] | dict[str, Any], as_json: bool, table: Table | None = None) -> None:
    if as_json or table is None:
        if isinstance(value, BaseModel):
            data: Any = value.model_dump(mode="json")
        elif isinstance(value, dict):
            data = value
        else:
            data = [v.model_dump(mode="json") for v in value]
        sys.stdout.write(json.dumps(data, indent=None if as_json else 2) + "\n")
    else:
        out().print(table)


def utc_stamp(moment: datetime, *, millis: bool = False) -> str:
    """A compact UTC timestamp (``2026-11-28T06:24:55Z``) that tables never cut."""
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds" if millis else "seconds")
    return text.removesuffix("+00:00") + "Z"


def _narrow_table(*folding: str) -> Table:
    """A table for 80 columns: no outer edges, and text columns fold rather than end in an ellipsis."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    for name in folding:
        table.add_column(name, overflow="fold")
    return table


def _tasks_table(tasks: Sequence[Task]) -> Table:
    table = _narrow_table("name")
    table.add_column("status", overflow="fold", min_width=6)
    table.add_column("schedule", overflow="fold", min_width=8)
    table.add_column("next run (UTC)", no_wrap=True, min_width=20)
    table.add_column("ver", overflow="fold")
    table.add_column("fires", overflow="fold")
    table.add_column("id", no_wrap=True, min_width=19)  # ids are copied into the next command: never cut
    for t in tasks:
        schedule = t.schedule.get("expr") or t.schedule.get("kind", "")
        next_run = utc_stamp(t.next_run_at) if t.next_run_at else "-"
        table.add_row(t.name, t.status, str(schedule), next_run, str(t.version), str(t.fire_count), t.id)
    return table


def tasks_table(tasks: Sequence[Task], health: bool = False) -> Table:
    """The task table, or with ``health`` each task's last result and 24 h figures in place of its
    schedule, version and fires (``GET /v1/tasks?health=true``): 80 columns either way."""
    if not health:
        return _tasks_table(tasks)
    table = _narrow_table("name")
    for column in ("status", "last", "ok 24h", "failed", "rate"):
        table.add_column(column, overflow="fold")
    table.add_column("id", no_wrap=True, min_width=19)
    for t in tasks:
        h = t.health
        if h is None:
            figures = ["-"] * 4
        else:
            rate = "-" if h.success_rate is None else _percent_down(h.success_rate)
            figures = [h.last_status or "-", str(h.delivered), str(h.failed), rate + ("+" if h.capped else "")]
        table.add_row(t.name, t.status, *figures, t.id)
    return table


def _percent_down(rate: float) -> str:
    """``0.999`` as ``99.9%``, ``0.5`` as ``50%``: rounded down, so a rate below 1 never reads 100%."""
    return f"{math.floor(round(rate * 1000, 6)) / 10:g}%"


def instant_ms(text: str | None, flag: str) -> int | None:
    """``--before``/``--after``: epoch ms, or an ISO-8601 instant (UTC unless it names its offset)."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO-8601 instant or epoch ms", param_hint=flag) from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def _flows_table(flows: Sequence[Flow]) -> Table:
    """Kind and the full error are in ``--json``; here the last answer is its status code and error together."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column("scheduled (UTC)", no_wrap=True, min_width=20)
    table.add_column("status", overflow="fold", min_width=7)
    table.add_column("tries", overflow="fold")
    table.add_column("last answer", overflow="fold")
    table.add_column("flow id", no_wrap=True, min_width=33)
    for f in flows:
        answer = " ".join(x for x in (str(f.last_status_code or ""), (f.last_error or "")[:60]) if x) or "-"
        table.add_row(utc_stamp(f.scheduled_at), f.status, str(f.attempts), answer, f.id)
    return table


def _schedule(
    delay_: str | None,
    at_: str | None,
    cron_: str | None,
    every_: str | None,
    timezone: str,
    fixed_delay_: str | None = None,
) -> dict[str, Any] | None:
    given = [x for x in (delay_, at_, cron_, every_, fixed_delay_) if x is not None]
    if len(given) > 1:
        raise typer.BadParameter("give one of --delay, --at, --cron, --every, --fixed-delay")
    if fixed_delay_ is not None:
        return fixed_delay(ms=parse_duration_ms(fixed_delay_))
    if delay_ is not None:
        return delay(ms=parse_duration_ms(delay_))
    if at_ is not None:
        return {"kind": "at", "at_ms": int(at_)} if at_.isdigit() else {"kind": "at", "at": at_}
    if cron_ is not None:
        return cron(cron_, timezone=timezone)
    if every_ is not None:
        return every(ms=parse_duration_ms(every_))
    return None


def _headers(values: list[str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for value in values or []:
        name, sep, content = value.partition(":")
        if not sep:
            raise typer.BadParameter(f"header {value!r} is not NAME:VALUE")
        headers[name.strip()] = content.strip()
    return headers


def _json_arg(text: str | None, name: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"{name} is not JSON: {error}") from None


def _read_source(source: str, flag: str) -> str:
    """The text of a file, or of stdin for ``-``; an unreadable one is an error naming ``flag``."""
    try:
        return sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as error:
        raise typer.BadParameter(f"{flag} {source}: {error.strerror}") from None


def _request_file(source: str | None) -> dict[str, Any]:
    """The --request body: a JSON object read from a file, or stdin for ``-``."""
    if source is None:
        return {}
    body = _json_arg(_read_source(source, "--request"), "--request")
    if not isinstance(body, dict):
        raise typer.BadParameter("--request must hold a JSON object (the POST /v1/tasks body)")
    return body


Delay = Annotated[str | None, typer.Option("--delay", help="fire once after this long (e.g. 30m)")]
At = Annotated[str | None, typer.Option("--at", help="fire once at this ISO-8601 instant (or epoch ms)")]
Cron = Annotated[str | None, typer.Option("--cron", help="cron expression (5 or 6 fields)")]
Every = Annotated[str | None, typer.Option("--every", help="fixed rate (e.g. 30s)")]
FixedDelay = Annotated[
    str | None, typer.Option("--fixed-delay", help="each run this long after the previous one ended (e.g. 30s)")
]
Tz = Annotated[str, typer.Option("--tz", help="IANA time zone for --cron")]
Jitter = Annotated[
    str | None,
    typer.Option("--jitter", help="fire each instant up to this long after it, spread by task (e.g. 30s)"),
]
CalendarName = Annotated[
    str | None, typer.Option("--calendar", help="skip the instants the app's calendar of this name excludes")
]
Header = Annotated[list[str] | None, typer.Option("--header", "-H", help="NAME:VALUE (repeatable)")]
Health = Annotated[
    bool,
    typer.Option(
        "--health",
        help="each task's last result and its last 24 h (delivered, failed, success rate); at most 100 a page",
    ),
]


# ---- task -------------------------------------------------------------------------------------------


@task_app.command("create")
def task_create(
    name: str,
    url_: Annotated[str | None, typer.Option("--callback", help="callback URL (or --target)")] = None,
    target: Annotated[
        list[str] | None, typer.Option("--target", help="a named target of the app (repeatable: multicast)")
    ] = None,
    delay_: Delay = None,
    at_: At = None,
    cron_: Cron = None,
    every_: Every = None,
    fixed_delay_: FixedDelay = None,
    tz: Tz = "UTC",
    jitter: Jitter = None,
    calendar: CalendarName = None,
    key: Annotated[str | None, typer.Option("--key", help="idempotency key")] = None,
    payload: Annotated[str | None, typer.Option("--payload", help="JSON payload")] = None,
    method: Annotated[str, typer.Option("--method")] = "POST",
    header: Header = None,
    misfire: Annotated[str | None, typer.Option("--misfire", help="fire_now|fire_soon|skip|catch_up")] = None,
    delivery: Annotated[str | None, typer.Option("--delivery", help="delivery mode (see POST /v1/tasks)")] = None,
    request: Annotated[
        str | None,
        typer.Option("--request", help="JSON file (or - for stdin) with the POST /v1/tasks body; flags override it"),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Register a task (every API field is reachable through --request; flags override its fields)."""
    base = _request_file(request)
    schedule = _schedule(delay_, at_, cron_, every_, tz, fixed_delay_) or base.get("schedule")
    if schedule is None:
        raise typer.BadParameter("give one of --delay, --at, --cron, --every, --fixed-delay (or schedule in --request)")
    if isinstance(schedule, dict):
        schedule = jittered_on_calendar(schedule, jitter, calendar)
    callback: dict[str, Any]
    if url_ is not None and target:
        raise typer.BadParameter("give --callback URL or --target NAME, not both")
    if target:
        callback = {"target": target[0]} if len(target) == 1 else {"targets": target}
    elif url_ is not None:
        callback = {**(base.get("callback") or {}), "url": url_, "method": method}
        callback.pop("target", None)
        callback.pop("targets", None)
        if header:
            callback["headers"] = _headers(header)
    elif isinstance(base.get("callback"), dict):
        callback = base["callback"]
    else:
        raise typer.BadParameter("give --callback URL or --target NAME (or callback in --request)")

    def created(sdk: Client) -> Task:
        return sdk.create_task(
            name,
            schedule,
            callback=callback,
            key=key if key is not None else base.get("key"),
            payload=_json_arg(payload, "--payload") if payload is not None else base.get("payload"),
            misfire_policy=misfire if misfire is not None else base.get("misfire_policy"),
            delivery=delivery if delivery is not None else base.get("delivery"),
        )

    task = _ask(url, api_key, "--api-key", created)
    _emit(task, as_json, _tasks_table([task]))


def _task_command(verb: str, doc: str) -> Callable[..., None]:
    """``tjobs task VERB TASK_ID``: the SDK's ``VERB_task``, answered by the task."""

    def command(task_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False) -> None:
        task: Task = _ask(url, api_key, "--api-key", lambda sdk: getattr(sdk, f"{verb}_task")(task_id))
        _emit(task, as_json, _tasks_table([task]))

    command.__name__, command.__qualname__, command.__doc__ = f"task_{verb}", f"task_{verb}", doc
    return task_app.command(verb)(command)


task_get = _task_command("get", "Show one task.")


@task_app.command("list")
def task_list(
    status: Annotated[str | None, typer.Option("--status")] = None,
    kind: Annotated[str | None, typer.Option("--kind")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="name prefix")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 50,
    all_: Annotated[bool, typer.Option("--all", help="every page")] = False,
    health: Health = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """List tasks (newest shards first page; --all walks every page)."""

    def listed(sdk: Client) -> list[Task]:
        if all_:
            return list(sdk.iter_tasks(status=status, kind=kind, name_prefix=prefix, health=health))
        return sdk.list_tasks(limit=limit, status=status, kind=kind, name_prefix=prefix, health=health).items

    tasks = _ask(url, api_key, "--api-key", listed)
    _emit(tasks, as_json, tasks_table(tasks, health))


@task_app.command("update")
def task_update(
    task_id: str,
    name: Annotated[str | None, typer.Option("--name")] = None,
    callback_url: Annotated[str | None, typer.Option("--callback", help="new callback URL")] = None,
    payload: Annotated[str | None, typer.Option("--payload", help="JSON payload")] = None,
    delay_: Delay = None,
    at_: At = None,
    cron_: Cron = None,
    every_: Every = None,
    fixed_delay_: FixedDelay = None,
    tz: Tz = "UTC",
    jitter: Jitter = None,
    calendar: CalendarName = None,
    misfire: Annotated[str | None, typer.Option("--misfire")] = None,
    version: Annotated[int | None, typer.Option("--version", help="expected version (409 if it moved on)")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Change a task's name, schedule, callback, payload or misfire policy."""
    fields: dict[str, Any] = {}
    if name is not None:
        fields["name"] = name
    if callback_url is not None:
        fields["callback"] = {"url": callback_url}
    if payload is not None:
        fields["payload"] = _json_arg(payload, "--payload")
    if misfire is not None:
        fields["misfire_policy"] = misfire
    schedule = _schedule(delay_, at_, cron_, every_, tz, fixed_delay_)
    if schedule is not None:
        fields["schedule"] = jittered_on_calendar(schedule, jitter, calendar)
    elif jitter is not None or calendar is not None:
        flag = "--jitter" if jitter is not None else "--calendar"
        raise typer.BadParameter(
            "goes with the new schedule (--cron, --every): it replaces the whole one", param_hint=flag
        )
    task = _ask_update(url, api_key, fields, lambda sdk: sdk.update_task(task_id, version=version, **fields))
    _emit(task, as_json, _tasks_table([task]))


task_pause = _task_command("pause", "Pause a task.")
task_resume = _task_command("resume", "Resume a paused task.")


@task_app.command("trigger")
def task_trigger(
    task_id: str,
    payload: Annotated[
        str | None,
        typer.Option("--payload", help="JSON sent instead of the task's payload, for this flow only"),
    ] = None,
    payload_file: Annotated[
        str | None,
        typer.Option("--payload-file", help="the same, read from a JSON file (or - for stdin)"),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Fire a task now (its own flow; the schedule is untouched).

    Without --payload or --payload-file the flow sends the task's payload.

    With one, it sends that JSON instead (null included), on every attempt of this flow only.

    A task whose callback has its own body or is a GET refuses a payload (a 422 naming the payload field).
    """
    if payload is not None and payload_file is not None:
        raise typer.BadParameter("give --payload or --payload-file, not both")
    override: dict[str, Any] = {}
    if payload is not None:
        override["payload"] = _json_arg(payload, "--payload")
    elif payload_file is not None:
        override["payload"] = _json_arg(_read_source(payload_file, "--payload-file"), "--payload-file")
    flow = _ask(url, api_key, "--api-key", lambda sdk: sdk.trigger_task(task_id, **override))
    _emit(flow, as_json, _flows_table([flow]))


@task_app.command("delete")
def task_delete(task_id: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False) -> None:
    """Delete a task (its flows stay as history)."""
    _ask(url, api_key, "--api-key", lambda sdk: sdk.delete_task(task_id))
    _emit({"deleted": task_id}, as_json, None) if as_json else out().print(f"deleted {task_id}")


@task_app.command("flows")
def task_flows(
    task_id: str,
    limit: Annotated[int, typer.Option("--limit")] = 20,
    before: Annotated[
        str | None, typer.Option("--before", help="an older page: scheduled before this (ISO-8601 or epoch ms)")
    ] = None,
    after: Annotated[
        str | None, typer.Option("--after", help="a newer page: scheduled just after this (ISO-8601 or epoch ms)")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """A task's flows, newest first: the newest, or the page before or after an instant."""
    around = {"before_ms": instant_ms(before, "--before"), "after_ms": instant_ms(after, "--after")}
    flows = _ask(url, api_key, "--api-key", lambda sdk: sdk.list_flows(task_id, limit=limit, **around))
    _emit(flows, as_json, _flows_table(flows))


# ---- app --------------------------------------------------------------------------------------------------


def _app_table(app: Any) -> Table:
    table = Table("field", "value")
    for name, value in app.model_dump(mode="json").items():
        if value is not None:
            table.add_row(name, json.dumps(value) if isinstance(value, dict | list) else str(value))
    return table


@app_app.command("create")
def app_create(
    name: str,
    rate: Annotated[float | None, typer.Option("--rate", help="callbacks per second")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="callbacks in flight")] = None,
    allow_host: Annotated[list[str] | None, typer.Option("--allow-host", help="admitted host/network")] = None,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Create an app; prints its API key and signing secret once."""
    fields = _given(rate_limit_per_s=rate, max_concurrency=concurrency, allowed_callback_hosts=allow_host or None)
    app = _ask(url, admin_key, "--admin-key", lambda sdk: sdk.create_app(name, **fields))
    _emit(app, as_json, _app_table(app))


@app_app.command("rotate")
def app_rotate(
    app_id: str,
    key: Annotated[bool, typer.Option("--key/--no-key", help="rotate the API key")] = True,
    secret: Annotated[bool, typer.Option("--secret/--no-secret", help="rotate the signing secret")] = True,
    grace_s: Annotated[int, typer.Option("--grace-s", help="old secret keeps signing this long")] = 86_400,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Rotate an app's API key and/or signing secret."""
    app = _ask(
        url, admin_key, "--admin-key", lambda sdk: sdk.rotate_app(app_id, api_key=key, secret=secret, grace_s=grace_s)
    )
    _emit(app, as_json, _app_table(app))


@app_app.command("show")
def app_show(
    app_id: Annotated[str | None, typer.Argument(help="app id (admin key); omit to show your own app")] = None,
    stats: Annotated[bool, typer.Option("--stats", help="show its stats instead")] = False,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Show an app (admin key) or your own (API key), or its stats."""

    def shown(sdk: Client) -> BaseModel:
        if app_id is None:
            return sdk.stats() if stats else sdk.app()
        return sdk.app_stats(app_id) if stats else sdk.get_app(app_id)

    if app_id is not None:
        app = _ask(url, admin_key, "--admin-key", shown)
    else:
        app = _ask(url, api_key, "--api-key", shown)
    _emit(app, as_json, _app_table(app))


def at_instant(text: str) -> dict[str, Any]:
    """``--at`` as a schedule (exposed for tests)."""
    return at(int(text)) if text.isdigit() else {"kind": "at", "at": text}


__all__ = ["app_app", "task_app"]
