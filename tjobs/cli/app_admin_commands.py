"""``tjobs app list|update|disable|enable|delete``: the operator's app commands (admin key), added to ``tjobs app``.

``delete`` asks for the app id again (``--confirm``, or typed at the prompt): it deletes every task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from tjobs.cli.api_commands import (
    DEFAULT_URL,
    AdminKey,
    AsJson,
    Url,
    _app_table,
    _ask,
    _ask_pages,
    _emit,
    _json_arg,
    out,
)
from tjobs.client import App


def apps_table(apps: Sequence[App]) -> Table:
    table = Table("name", "state", "created")
    table.add_column("id", no_wrap=True, min_width=16)  # copied into the next command: never cut
    for app in apps:
        state = "disabled" if app.disabled else "enabled"
        table.add_row(app.name, state, app.created_at.date().isoformat(), app.id)
    return table


def app_list(
    limit: Annotated[int, typer.Option("--limit")] = 100,
    all_: Annotated[bool, typer.Option("--all", help="every page")] = False,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """List the apps (admin key)."""
    apps = _ask_pages(
        url, admin_key, "--admin-key", all_, lambda sdk, cursor: sdk.list_apps(limit=limit, cursor=cursor)
    )
    _emit(apps, as_json, apps_table(apps))


def app_update(
    app_id: str,
    name: Annotated[str | None, typer.Option("--name")] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="callbacks per second")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="callbacks in flight")] = None,
    allow_host: Annotated[
        list[str] | None, typer.Option("--allow-host", help="admitted host/network (repeatable; replaces the list)")
    ] = None,
    max_active_tasks: Annotated[int | None, typer.Option("--max-active-tasks")] = None,
    api_rate: Annotated[float | None, typer.Option("--api-rate", help="API requests per second")] = None,
    create_rate: Annotated[float | None, typer.Option("--create-rate", help="task creates per second")] = None,
    run_log_retention_days: Annotated[
        float | None,
        typer.Option(
            "--run-log-retention-days", help="days a run's log is kept after its flow ended (<= retention.days)"
        ),
    ] = None,
    callback_defaults: Annotated[
        str | None, typer.Option("--callback-defaults", help="JSON object: the app's callback defaults")
    ] = None,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Change an app's limits, allowed hosts or callback defaults (admin key); unnamed fields stay."""
    fields: dict[str, Any] = {
        wire: value
        for wire, value in (
            ("name", name),
            ("rate_limit_per_s", rate),
            ("max_concurrency", concurrency),
            ("allowed_callback_hosts", allow_host),
            ("max_active_tasks", max_active_tasks),
            ("api_rate_limit_per_s", api_rate),
            ("create_rate_limit_per_s", create_rate),
            ("run_log_retention_days", run_log_retention_days),
            ("callback_defaults", _json_arg(callback_defaults, "--callback-defaults")),
        )
        if value is not None
    }
    if not fields:
        raise typer.BadParameter("give at least one field to change (see --help)")
    app = _ask(url, admin_key, "--admin-key", lambda sdk: sdk.update_app(app_id, **fields))
    _emit(app, as_json, _app_table(app))


def _switch(app_id: str, disabled: bool, url: str, admin_key: str | None, as_json: bool) -> None:
    app = _ask(
        url, admin_key, "--admin-key", lambda sdk: sdk.disable_app(app_id) if disabled else sdk.enable_app(app_id)
    )
    _emit(app, as_json, _app_table(app))


def app_disable(app_id: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """Disable an app: its key answers 403 and its tasks do not fire until it is enabled."""
    _switch(app_id, True, url, admin_key, as_json)


def app_enable(app_id: str, url: Url = DEFAULT_URL, admin_key: AdminKey = None, as_json: AsJson = False) -> None:
    """Enable an app again: its tasks resume under their misfire policy."""
    _switch(app_id, False, url, admin_key, as_json)


def app_delete(
    app_id: str,
    confirm: Annotated[str | None, typer.Option("--confirm", help="the app id again")] = None,
    url: Url = DEFAULT_URL,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Delete an app with all its tasks and targets (asks for its id again)."""
    if confirm is None:
        confirm = typer.prompt(f"This deletes app {app_id} and every task of it. Type its id to confirm")
    deleted = _ask(url, admin_key, "--admin-key", lambda sdk: sdk.delete_app(app_id, confirm=confirm))
    if as_json:
        _emit(deleted, True)
    else:
        out().print(f"deleted app {deleted.id} and {deleted.deleted_tasks} tasks")


def add_app_admin_commands(group: typer.Typer) -> None:
    """Register ``list``, ``update``, ``disable``, ``enable`` and ``delete`` on ``tjobs app``."""
    group.command("list")(app_list)
    group.command("update")(app_update)
    group.command("disable")(app_disable)
    group.command("enable")(app_enable)
    group.command("delete")(app_delete)


__all__ = ["add_app_admin_commands", "apps_table"]
