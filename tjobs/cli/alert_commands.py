"""``tjobs alerts``: alert rules and channels, and what fires (``/v1/alerts``, docs/operations.md, Alerts).

With an app's key the commands manage that app's rules and channels; with the admin key the global ones
(and every app's, to read and delete).

::

    tjobs alerts channel-add ops --kind slack --setting url=https://hooks.slack.com/services/...
    tjobs alerts rule-add dlq --kind dead_letters --param threshold=10 --param window_minutes=5 --channel chan_...
    tjobs alerts active
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, AdminKey, ApiKey, AsJson, Url, _either_key, answer, cli_client, out

alerts_app = typer.Typer(help="Alert rules, channels and what fires.", no_args_is_help=True)

Params = Annotated[list[str] | None, typer.Option("--param", "-p", help="a rule parameter: name=value (repeat)")]
Settings = Annotated[list[str] | None, typer.Option("--setting", "-s", help="a channel setting: name=value (repeat)")]


def _value(text: str) -> Any:
    """``10`` is a number, ``true`` a boolean, anything else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(items: list[str] | None, flag: str) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{flag} takes name=value, not {item!r}")
        pairs[name] = _value(value)
    return pairs


def _call(url: str, key: str, method: str, path: str, body: Any = None, params: dict[str, str] | None = None) -> Any:
    """The API's JSON answer through the CLI's client, or the error printed and the command ended (exit 1)."""
    return answer(cli_client(url, f"Bearer {key}"), lambda sdk: sdk.request(method, path, json=body, params=params))


def _print(value: Any, as_json: bool, table: Table | None) -> None:
    if as_json or table is None:
        sys.stdout.write(json.dumps(value, indent=None if as_json else 2) + "\n")
    else:
        out().print(table)


def _table(*columns: str) -> Table:
    return Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)


@alerts_app.command("rules")
def list_rules(
    url: Url = DEFAULT_URL, api_key: ApiKey = None, admin_key: AdminKey = None, as_json: AsJson = False
) -> None:
    """List the alert rules."""
    items = _call(url, _either_key(api_key, admin_key), "GET", "/v1/alerts/rules")["items"]
    table = _table("id", "name", "kind", "params", "channels", "repeat", "enabled", "app")
    for rule in items:
        params = " ".join(f"{k}={v}" for k, v in rule["params"].items())
        table.add_row(
            rule["id"],
            rule["name"],
            rule["kind"],
            params,
            ",".join(rule["channels"]),
            f"{rule['repeat_s']} s",
            "yes" if rule["enabled"] else "no",
            rule["app_id"] or "(global)",
        )
    _print(items, as_json, table)


@alerts_app.command("rule-add")
def add_rule(
    name: Annotated[str, typer.Argument(help="the rule's name")],
    kind: Annotated[str, typer.Option("--kind", help="dead_letters, slo_missed, pool_executors, node_down, ...")],
    param: Params = None,
    channel: Annotated[list[str] | None, typer.Option("--channel", "-c", help="a channel id (repeat)")] = None,
    repeat_s: Annotated[int | None, typer.Option("--repeat-s", help="repeat while firing (0: never)")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Create an alert rule."""
    body: dict[str, Any] = {"name": name, "kind": kind, "params": _pairs(param, "--param"), "channels": channel or []}
    if repeat_s is not None:
        body["repeat_s"] = repeat_s
    _print(_call(url, _either_key(api_key, admin_key), "POST", "/v1/alerts/rules", body), as_json, None)


@alerts_app.command("rule-rm")
def remove_rule(
    rule_id: Annotated[str, typer.Argument(help="the rule's id")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
) -> None:
    """Delete an alert rule (and its alerts' states)."""
    _call(url, _either_key(api_key, admin_key), "DELETE", f"/v1/alerts/rules/{rule_id}")
    out().print(f"deleted {rule_id}")


@alerts_app.command("channels")
def list_channels(
    url: Url = DEFAULT_URL, api_key: ApiKey = None, admin_key: AdminKey = None, as_json: AsJson = False
) -> None:
    """List the alert channels (secrets hidden)."""
    items = _call(url, _either_key(api_key, admin_key), "GET", "/v1/alerts/channels")["items"]
    table = _table("id", "name", "kind", "settings", "app")
    for channel in items:
        settings = " ".join(f"{k}={v}" for k, v in channel["settings"].items())
        table.add_row(channel["id"], channel["name"], channel["kind"], settings, channel["app_id"] or "(global)")
    _print(items, as_json, table)


@alerts_app.command("channel-add")
def add_channel(
    name: Annotated[str, typer.Argument(help="the channel's name")],
    kind: Annotated[str, typer.Option("--kind", help="webhook, slack, dingtalk, wecom or email")],
    setting: Settings = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """Create an alert channel (a webhook's generated secret is printed this once)."""
    settings = _pairs(setting, "--setting")
    if kind == "email" and isinstance(settings.get("to"), str):
        settings["to"] = settings["to"].split(",")
    body = {"name": name, "kind": kind, "settings": settings}
    _print(_call(url, _either_key(api_key, admin_key), "POST", "/v1/alerts/channels", body), as_json, None)


@alerts_app.command("channel-rm")
def remove_channel(
    channel_id: Annotated[str, typer.Argument(help="the channel's id")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
) -> None:
    """Delete an alert channel (refused while a rule names it)."""
    _call(url, _either_key(api_key, admin_key), "DELETE", f"/v1/alerts/channels/{channel_id}")
    out().print(f"deleted {channel_id}")


@alerts_app.command("active")
def active(
    resolved: Annotated[bool, typer.Option("--resolved", help="list resolved alerts too")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    admin_key: AdminKey = None,
    as_json: AsJson = False,
) -> None:
    """What fires now."""
    params = {"resolved": "true"} if resolved else None
    items = _call(url, _either_key(api_key, admin_key), "GET", "/v1/alerts/active", params=params)["items"]
    table = _table("status", "rule", "subject", "summary", "since", "app")
    for alert in items:
        table.add_row(
            alert["status"],
            alert["rule_name"] or alert["rule_id"],
            alert["subject"],
            alert["summary"],
            alert["since"],
            alert["app_id"] or "(cluster)",
        )
    _print(items, as_json, table)
