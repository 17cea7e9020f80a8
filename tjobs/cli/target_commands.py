"""``tjobs target create|list|get|update|delete``: an app's named targets from a terminal, on the SDK.

Takes the app's key (``--api-key``, ``TJOBS_API_KEY``). Settings and the retry policy are JSON
objects (``--settings '{"url": "amqp://127.0.0.1:5672/", "exchange": "orders"}'``). Credentials
come from ``--credentials-file`` (a JSON object: keeps them out of the shell history and the process
list) or ``--credential KEY=VALUE``; they are sent once and never shown back (the table lists their
keys only). ``update`` sets the keys it is given and keeps the others (``--remove-credential KEY``
drops one, ``--clear-credentials`` all): a password is rotated without sending the username again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from tjobs.cli.api_commands import DEFAULT_URL, ApiKey, AsJson, Url, _ask, _ask_pages, _ask_update, _emit, _json_arg
from tjobs.client import Client, Target

target_app = typer.Typer(
    help="Named targets (HTTP, gRPC, AMQP, NATS, Redis Streams): create, list, get, update, delete.",
    no_args_is_help=True,
)

SettingsJson = Annotated[str | None, typer.Option("--settings", help="the protocol's settings, a JSON object")]
RetryJson = Annotated[
    str | None, typer.Option("--retry", help='retry policy JSON: {"max_attempts", "max_age_s", "backoff_base_ms", ...}')
]
Credential = Annotated[
    list[str] | None, typer.Option("--credential", help="KEY=VALUE (repeatable); prefer --credentials-file")
]
CredentialsFile = Annotated[
    Path | None, typer.Option("--credentials-file", help="a JSON object of credentials", exists=True, dir_okay=False)
]


def _where(target: Target) -> str:
    settings = target.settings
    for key in ("url", "address"):
        if settings.get(key):
            return str(settings[key])
    for key in ("urls", "servers"):
        if settings.get(key):
            return ", ".join(settings[key])
    return ""


def targets_table(targets: list[Target]) -> Table:
    table = Table("name", "protocol", "version", "where", "credentials")
    for target in targets:
        table.add_row(
            target.name, target.protocol, str(target.version), _where(target), ", ".join(sorted(target.credentials))
        )
    return table


def _object(text: str | None, name: str) -> dict[str, Any] | None:
    value = _json_arg(text, name)
    if value is not None and not isinstance(value, dict):
        raise typer.BadParameter(f"{name} must be a JSON object")
    return value


def _credentials(pairs: list[str] | None, path: Path | None) -> dict[str, str] | None:
    if not pairs and path is None:
        return None
    credentials: dict[str, str] = {}
    if path is not None:
        try:
            loaded = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise typer.BadParameter(
                f"--credentials-file is not a readable JSON object ({type(error).__name__})"
            ) from None
        if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
            raise typer.BadParameter("--credentials-file must hold a JSON object of strings")
        credentials.update(loaded)
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter("--credential takes KEY=VALUE")  # never echo the value
        credentials[key] = value
    return credentials


@target_app.command("create")
def target_create(
    name: str,
    protocol: Annotated[str, typer.Option("--protocol", help="http|grpc|amqp|nats|redis_stream")],
    settings: SettingsJson = None,
    retry: RetryJson = None,
    credential: Credential = None,
    credentials_file: CredentialsFile = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Create a target; tasks then name it with --target."""
    parsed = _object(settings, "--settings")
    if parsed is None:
        raise typer.BadParameter("give --settings (a JSON object)")

    def created(sdk: Client) -> Target:
        retry_, credentials = _object(retry, "--retry"), _credentials(credential, credentials_file)
        return sdk.create_target(name, protocol, parsed, retry=retry_, credentials=credentials)

    target = _ask(url, api_key, "--api-key", created)
    _emit(target, as_json, targets_table([target]))


@target_app.command("list")
def target_list(url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False) -> None:
    """Every target of the app, by name."""
    targets = _ask_pages(
        url, api_key, "--api-key", True, lambda sdk, cursor: sdk.list_targets(limit=1000, cursor=cursor)
    )
    _emit(targets, as_json, targets_table(targets))


@target_app.command("get")
def target_get(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False) -> None:
    """Show one target (its settings and retry policy; credentials by key only)."""
    target = _ask(url, api_key, "--api-key", lambda sdk: sdk.get_target(name))
    if as_json:
        _emit(target, True)
        return
    _emit(target, False, targets_table([target]))
    _emit({"settings": target.settings, "retry": target.retry}, False)


@target_app.command("update")
def target_update(
    name: str,
    protocol: Annotated[str | None, typer.Option("--protocol", help="with --settings")] = None,
    settings: SettingsJson = None,
    retry: RetryJson = None,
    credential: Credential = None,
    credentials_file: CredentialsFile = None,
    clear_credentials: Annotated[bool, typer.Option("--clear-credentials")] = False,
    remove_credential: Annotated[
        list[str] | None, typer.Option("--remove-credential", help="KEY (repeatable): drop that stored credential")
    ] = None,
    version: Annotated[int | None, typer.Option("--version", help="expected version (409 if it moved on)")] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Replace a target's settings or retry policy, or set, remove or clear credentials (the keys not named
    are kept); the next attempt of every task naming it uses it."""
    fields: dict[str, Any] = {}
    if protocol is not None:
        fields["protocol"] = protocol
    if settings is not None:
        fields["settings"] = _object(settings, "--settings")
    if retry is not None:
        fields["retry"] = _object(retry, "--retry")
    given = _credentials(credential, credentials_file)
    credentials: dict[str, str | None] | None = None if given is None else dict(given)
    if clear_credentials:
        if credentials is not None or remove_credential:
            raise typer.BadParameter(
                "--clear-credentials goes without --credential, --credentials-file and --remove-credential"
            )
        credentials = {}
    for key in remove_credential or []:
        if credentials is not None and key in credentials:
            raise typer.BadParameter(f"--remove-credential {key} and a value for {key} at once")
        credentials = {**(credentials or {}), key: None}  # null: the API removes the key
    if credentials is not None:
        fields["credentials"] = credentials
    target = _ask_update(url, api_key, fields, lambda sdk: sdk.update_target(name, version=version, **fields))
    _emit(target, as_json, targets_table([target]))


@target_app.command("delete")
def target_delete(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete a target (refused, saying how many, while tasks that can still fire name it)."""
    _ask(url, api_key, "--api-key", lambda sdk: sdk.delete_target(name))
    _emit({"deleted": name}, False)
