"""``tjobs audit``: the audit log, newest first, with the API's filters (``GET /v1/audit``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, AdminKey, ApiKey, AsJson, Url, _ask, _either_key, _emit, out


def _change(entry: dict[str, Any]) -> str:
    """What changed, in a line: the top-level fields whose values differ between before and after."""
    before, after = entry.get("before"), entry.get("after")
    if before is None or after is None or not isinstance(before, dict) or not isinstance(after, dict):
        return "created" if before is None and after is not None else "gone" if after is None else ""
    changed = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
    return ", ".join(changed)[:60]


def audit_table(entries: list[dict[str, Any]]) -> Table:
    table = Table("id", "at", "actor", "app", "action", "object", "changed", "via", "source", box=box.SIMPLE_HEAD)
    for entry in entries:
        actor = f"{entry['actor']['name']} ({entry['actor']['kind']})"
        table.add_row(
            entry["id"],
            entry["at"],
            actor,
            entry["app_id"] or "-",
            entry["action"],
            entry["object_id"] or "-",
            _change(entry),
            entry["via"],
            entry["source"] or "-",
        )
    return table


def audit(
    app_id: Annotated[str | None, typer.Option("--app", help="admin: one app's entries")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="who: an app id, admin or a user name")] = None,
    action: Annotated[str | None, typer.Option("--action", help="an action or its prefix: task.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="at or after (RFC 3339 or epoch ms)")] = None,
    until: Annotated[str | None, typer.Option("--until", help="before (RFC 3339 or epoch ms)")] = None,
    object_id: Annotated[str | None, typer.Option("--object", help="the object's id")] = None,
    limit: Annotated[int, typer.Option("--limit", help="entries per page (1..500)")] = 50,
    cursor: Annotated[str | None, typer.Option("--cursor", help="next_cursor of a previous page")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Who changed what, newest first (the admin key: every app; an app key: its own)."""
    page = _ask(
        url,
        _either_key(api_key, admin_key),
        "--api-key",
        lambda sdk: sdk.audit(
            app_id=app_id,
            actor=actor,
            action=action,
            since=since,
            until=until,
            object_id=object_id,
            cursor=cursor,
            limit=limit,
        ),
    )
    if as_json:
        _emit(page, True)
        return
    out().print(audit_table(page["items"]))
    if page["next_cursor"]:
        out().print(f"more: --cursor {page['next_cursor']}")
