"""The CLI's settings: a configuration mistake ends the command with one line per bad setting and exit
code 2, never a traceback (:class:`tjobs.settings.InvalidSettings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tjobs.settings import InvalidSettings, Settings, load_settings

EXIT_INVALID_CONFIGURATION = 2


def settings_or_exit(config: Path | None, **overrides: Any) -> Settings:
    """:func:`tjobs.settings.load_settings`, or exit 2 naming each bad setting on stderr."""
    try:
        return load_settings(config, **overrides)
    except InvalidSettings as error:
        for line in str(error).splitlines():
            typer.echo(f"invalid configuration: {line}", err=True)
        raise typer.Exit(EXIT_INVALID_CONFIGURATION) from None
