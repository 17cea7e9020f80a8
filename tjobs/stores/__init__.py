"""Where tasks, flows and apps live: the contract (:mod:`tjobs.stores.base`, one part per role in
:mod:`tjobs.stores.contracts`) and its implementations.

- :class:`MemoryTaskStore` — the in-memory twin (``memory://``), for tests and experiments;
- :class:`SQLAlchemyTaskStore` — SQLite files (``sqlite+aiosqlite:///DIR``, the embedded default) or
  MariaDB/MySQL servers (``mysql+asyncmy://user@host:3306``).

Both pass the contract suites in ``tests/contract`` (one per role: ``test_store_fire_path_contract.py``,
``test_store_tasks_contract.py``, ``test_store_tenants_contract.py``, ``test_store_slo_contract.py``, ...).
"""

from __future__ import annotations

from tjobs.settings import StorageSettings
from tjobs.stores.base import FirePlanner, TaskStore
from tjobs.stores.memory import MemoryTaskStore

__all__ = ["FirePlanner", "MemoryTaskStore", "SQLAlchemyTaskStore", "TaskStore", "create_store"]


def create_store(settings: StorageSettings) -> TaskStore:
    """The store for ``settings.storage.urls``: ``memory://`` or a SQL URL (SQLite or MariaDB/MySQL)."""
    urls = settings.urls
    if urls and all(url.startswith("memory:") for url in urls):
        return MemoryTaskStore(settings.parsed_topology())
    from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

    return SQLAlchemyTaskStore(settings)


def __getattr__(name: str) -> object:
    if name == "SQLAlchemyTaskStore":  # imported lazily: SQLAlchemy's asyncio layer is not free to load
        from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

        return SQLAlchemyTaskStore
    raise AttributeError(name)
