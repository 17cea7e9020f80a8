"""The CLI's settings: a configuration mistake ends the command with one line per bad setting and exit
code 2, never a traceback (:class:`tjobs.settings.InvalidSettings`). Settings that disagree with the data
(a topology other than the one the data was written with, servers that are not the shard map's) end
``migrate``, ``serve`` and ``dev`` the same way (:func:`refusing_start_on_a_mismatch`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from tjobs.errors import TjobsError
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


@contextmanager
def refusing_start_on_a_mismatch() -> Iterator[None]:
    """Exit 2 with ``refusing to start: <why>`` on stderr when the settings disagree with the stored data
    (:class:`~tjobs.stores.contracts.shard_admin.StorageLayoutMismatch`); any other error propagates."""
    try:
        yield
    except TjobsError as error:
        from tjobs.stores.contracts import StorageLayoutMismatch  # a node imports it anyway

        if not isinstance(error, StorageLayoutMismatch):
            raise
        typer.echo(f"refusing to start: {error}", err=True)
        raise typer.Exit(EXIT_INVALID_CONFIGURATION) from None
