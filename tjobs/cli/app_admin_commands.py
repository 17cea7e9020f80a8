"""``tjobs app list|disable|enable|delete``: the operator's app commands (admin key), added to ``tjobs app``.

``delete`` asks for the app id again (``--confirm``, or typed at the prompt): it deletes every task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, AdminKey, AsJson, Url, _app_table, _client, _emit, _fail, out
from tjobs.client import App, TjobsClientError


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
    with _client(url, admin_key, "--admin-key") as sdk:
        try:
            page = sdk.list_apps(limit=limit)
            apps = list(page.items)
            while all_ and page.next_cursor is not None:
                page = sdk.list_apps(limit=limit, cursor=page.next_cursor)
                apps += page.items
        except TjobsClientError as error:
            raise _fail(error) from None
    _emit(apps, as_json, apps_table(apps))


def _switch(app_id: str, disabled: bool, url: str, admin_key: str | None, as_json: bool) -> None:
    with _client(url, admin_key, "--admin-key") as sdk:
        try:
            app = sdk.disable_app(app_id) if disabled else sdk.enable_app(app_id)
        except TjobsClientError as error:
            raise _fail(error) from None
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
    with _client(url, admin_key, "--admin-key") as sdk:
        try:
            deleted = sdk.delete_app(app_id, confirm=confirm)
        except TjobsClientError as error:
            raise _fail(error) from None
    if as_json:
        _emit(deleted, True)
    else:
        out.print(f"deleted app {deleted.id} and {deleted.deleted_tasks} tasks")


def add_app_admin_commands(group: typer.Typer) -> None:
    """Register ``list``, ``disable``, ``enable`` and ``delete`` on ``tjobs app``."""
    group.command("list")(app_list)
    group.command("disable")(app_disable)
    group.command("enable")(app_enable)
    group.command("delete")(app_delete)


__all__ = ["add_app_admin_commands", "apps_table"]
