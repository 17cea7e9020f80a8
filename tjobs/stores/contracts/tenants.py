"""Tenants: the apps (owners of tasks, by API key) and their named delivery targets."""

from __future__ import annotations

from abc import abstractmethod

from tjobs.model import App
from tjobs.stores.contracts.lifecycle import StoreLifecycle
from tjobs.targets.model import Target


class Tenants(StoreLifecycle):
    """Apps and targets live beside the shards, in the first logical database."""

    # ---- apps -------------------------------------------------------------------------------

    @abstractmethod
    async def put_app(self, app: App) -> None:
        """Insert or replace the app with ``app.id``."""

    @abstractmethod
    async def get_app(self, app_id: str) -> App | None: ...

    @abstractmethod
    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None: ...

    @abstractmethod
    async def list_apps(self) -> list[App]: ...

    @abstractmethod
    async def delete_app(self, app_id: str) -> bool:
        """Delete the app's row (its tasks are ``delete_app_tasks``'s); ``False`` if it did not exist."""

    # ---- targets (named delivery targets, beside the apps) -------------------------------------

    @abstractmethod
    async def put_target(self, target: Target, expected_version: int | None) -> None:
        """Store ``target`` under ``(target.app_id, target.name)``.

        ``expected_version=None`` creates it: raise :class:`tjobs.errors.TargetExists` if the app
        already has a target of that name. Otherwise replace the stored target only if it is still at
        ``expected_version`` (its version becomes ``target.version``): raise
        :class:`tjobs.errors.TargetVersionConflict` carrying the stored version if it moved, or
        :class:`tjobs.errors.NotFound` if it is gone. Credentials are stored as given.
        """

    @abstractmethod
    async def get_target(self, app_id: str, name: str) -> Target | None: ...

    @abstractmethod
    async def list_targets(self, app_id: str, after_name: str | None, limit: int) -> list[Target]:
        """The app's targets by ascending name, strictly after ``after_name``."""

    @abstractmethod
    async def delete_target(self, app_id: str, name: str) -> bool:
        """Delete the target; ``False`` if it did not exist. Tasks naming it are not checked here
        (:meth:`count_target_references` is the caller's check)."""

    @abstractmethod
    async def count_target_references(self, app_id: str, name: str) -> int:
        """How many of the app's tasks that can still fire (``active`` or ``paused``) name the target.

        Bounded by the references, not by the tasks: every task naming targets has one reference row
        per target in its shard (``task_targets_TT``), written in the same transaction as the task
        (insert, callback edit, delete, retention purge), so the count reads that target's index range
        in each shard (one statement per logical database), never the tasks themselves.
        """
