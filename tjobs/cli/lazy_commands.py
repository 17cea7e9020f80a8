"""The ``tjobs`` commands that are not the node's own, loaded when they are named.

``task``, ``app``, ``dlq``, ``flows``, ``schedule``, ``target``, ``import`` and ``slo`` speak to a node's
API through the SDK (httpx) and print rich tables; ``shards`` drives the shard mover. None of that is
part of ``tjobs serve``, ``migrate`` or ``dev``, and every node start used to import all of it. Here each
of those commands is built, from its module, when the command line names it (or ``--help`` lists it),
through typer's own construction (:func:`_build`), so it parses, helps and fails exactly as when it was
registered up front.

:class:`LazyCommandsGroup` is the root group's class (``typer.Typer(cls=...)``); :data:`LAZY_COMMANDS`
and :data:`LAZY_GROUPS` register each command on a typer app. Typer lists commands before groups, and
so does the root group: the lazy commands, the root's own (``migrate``, ``serve``, ``dev``), the groups.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

import typer
import typer.main
from typer.core import TyperGroup

if TYPE_CHECKING:
    from typer._click import Command


def _import(app: typer.Typer) -> None:
    from tjobs.cli.import_commands import import_tasks

    app.command("import")(import_tasks)


def _index_children(app: typer.Typer) -> None:
    from tjobs.cli.index_children import index_children_command

    app.command("index-children")(index_children_command)


def _audit(app: typer.Typer) -> None:
    from tjobs.cli.audit_commands import audit

    app.command("audit")(audit)


def _slo(app: typer.Typer) -> None:
    from tjobs.cli.slo_commands import slo

    app.command("slo")(slo)


@functools.cache  # the module's typer app gains its extra commands once per process
def _task_app() -> typer.Typer:
    from tjobs.cli.api_commands import task_app
    from tjobs.cli.backfill_commands import add_task_backfill
    from tjobs.cli.search_commands import add_task_search

    add_task_search(task_app)
    add_task_backfill(task_app)
    return task_app


@functools.cache
def _app_app() -> typer.Typer:
    from tjobs.cli.api_commands import app_app
    from tjobs.cli.app_admin_commands import add_app_admin_commands

    add_app_admin_commands(app_app)
    return app_app


def _dlq_app() -> typer.Typer:
    from tjobs.cli.dead_letter_commands import dlq_app

    return dlq_app


def _flows_app() -> typer.Typer:
    from tjobs.cli.search_commands import flows_app

    return flows_app


def _shards_app() -> typer.Typer:
    from tjobs.cli.shards import shards_app

    return shards_app


def _schedule_app() -> typer.Typer:
    from tjobs.cli.schedule_commands import schedule_app

    return schedule_app


def _users_app() -> typer.Typer:
    from tjobs.cli.account_commands import users_app

    return users_app


def _tokens_app() -> typer.Typer:
    from tjobs.cli.account_commands import tokens_app

    return tokens_app


def _alerts_app() -> typer.Typer:
    from tjobs.cli.alert_commands import alerts_app

    return alerts_app


def _target_app() -> typer.Typer:
    from tjobs.cli.target_commands import target_app

    return target_app


LAZY_COMMANDS: dict[str, Callable[[typer.Typer], None]] = {
    "import": _import,
    "slo": _slo,
    "audit": _audit,
    "index-children": _index_children,
}
LAZY_GROUPS: dict[str, Callable[[], typer.Typer]] = {
    "task": _task_app,
    "app": _app_app,
    "dlq": _dlq_app,
    "flows": _flows_app,
    "shards": _shards_app,
    "schedule": _schedule_app,
    "target": _target_app,
    "alerts": _alerts_app,
    "users": _users_app,
    "tokens": _tokens_app,
}


def _build(name: str) -> Command:
    """Command ``name`` as typer builds a command registered on the root app."""
    holder = typer.Typer()
    if name in LAZY_COMMANDS:
        LAZY_COMMANDS[name](holder)
    else:
        holder.add_typer(LAZY_GROUPS[name](), name=name)
    return typer.main.get_group(holder).commands[name]


class _Commands(MutableMapping[str, "Command"]):
    """The root group's commands: those built with it, and the lazy ones, each built on first lookup."""

    def __init__(self, built: MutableMapping[str, Command]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            if name not in LAZY_COMMANDS and name not in LAZY_GROUPS:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from LAZY_COMMANDS
        yield from (name for name in self._built if name not in LAZY_COMMANDS and name not in LAZY_GROUPS)
        yield from LAZY_GROUPS

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]


class LazyCommandsGroup(TyperGroup):
    """The root ``tjobs`` group: its :attr:`commands` build the lazy commands when looked up."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)
