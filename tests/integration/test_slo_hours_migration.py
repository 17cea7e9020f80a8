"""Revisions 0013 and 0014 on a deployment that has service-level minutes: a node refuses the schema
before them; ``tjobs migrate`` fills ``slo_hours`` from the minutes already stored (0013) and adds the
first attempts' lateness columns, zero in the rows already there (0014)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.contract.backends import drop_databases, mariadb_settings
from tjobs.model import SLO_LATENESS_SLOTS, SloCounts, SloMinute
from tjobs.settings import StorageSettings
from tjobs.stores.layout_record import StorageNotMigrated
from tjobs.stores.migrate import migrate
from tjobs.stores.schema_revision import known_revisions
from tjobs.stores.schema_slo import SLO_ANSWER_LATENESS_COLUMNS, SLO_SEND_LATENESS_COLUMNS
from tjobs.stores.sql_layout import MYSQL, create_engine_for
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

pytestmark = pytest.mark.asyncio

HEAD_REVISION = known_revisions()[0]  # the newest: what the node asks for
HOUR = 483_334


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageSettings]:
    if request.param == "sqlite":
        yield StorageSettings(urls=[f"sqlite+aiosqlite:///{tmp_path / 'data'}"], topology="1x1x2")
        return
    mariadb = mariadb_settings(request.getfixturevalue("mysql_url"))
    try:
        yield mariadb
    finally:
        await drop_databases(mariadb)


async def as_before_revision_0013(store: SQLAlchemyTaskStore, settings: StorageSettings) -> None:
    home = store.layout.apps_database
    engine = create_engine_for(home.engine_url, settings)
    qualifier = f"`{home.name}`." if store.layout.dialect == MYSQL else ""
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE {qualifier}slo_hours")
            await conn.exec_driver_sql(f"UPDATE {qualifier}alembic_version SET version_num = '0012_flow_attempt_log'")
    finally:
        await engine.dispose()


async def test_a_node_refuses_the_schema_before_the_hours_and_migrate_fills_them(settings: StorageSettings) -> None:
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        await store.check_layout()
        lateness = tuple(1 if slot == 3 else 0 for slot in range(SLO_LATENESS_SLOTS))
        one = SloCounts(1, 1, lateness=lateness)
        for node in ("n1", "n2"):  # each app every minute from 10 before HOUR to 70 into HOUR + 1
            await store.add_slo_minutes(
                node, [SloMinute(app, HOUR * 60 + k, one) for app in ("a", "b") for k in range(-10, 130)]
            )
        await as_before_revision_0013(store, settings)

        with pytest.raises(StorageNotMigrated, match=rf"0012_flow_attempt_log.*{HEAD_REVISION}.*tjobs migrate"):
            await store.check_layout()

        await migrate(settings)
        await store.check_layout()
        for app_id, per_minute in (("a", 2), (None, 4)):
            assert (await store.sum_slo_minutes(app_id, HOUR * 60, HOUR * 60 + 120)).fires == 120 * per_minute
            whole = await store.sum_slo_minutes(app_id, HOUR * 60 - 10, HOUR * 60 + 130)  # edges and two hours
            assert (whole.fires, whole.delivered, whole.lateness[3]) == (140 * per_minute,) * 3
        assert await store.purge_slo_minutes(HOUR * 60 + 61, 1_000) == 2 * 2 * 2 + 2 * 2 * 70  # hours too
        assert (await store.sum_slo_minutes(None, 0, HOUR * 60 + 60)).fires == 0
    finally:
        await store.close()


async def as_before_revision_0014(store: SQLAlchemyTaskStore, settings: StorageSettings) -> None:
    home = store.layout.apps_database
    engine = create_engine_for(home.engine_url, settings)
    qualifier = f"`{home.name}`." if store.layout.dialect == MYSQL else ""
    try:
        async with engine.begin() as conn:
            for table in ("slo_minutes", "slo_hours"):
                for column in (*SLO_SEND_LATENESS_COLUMNS, *SLO_ANSWER_LATENESS_COLUMNS):
                    await conn.exec_driver_sql(f"ALTER TABLE {qualifier}{table} DROP COLUMN {column}")
            await conn.exec_driver_sql(f"UPDATE {qualifier}alembic_version SET version_num = '0013_slo_hours'")
    finally:
        await engine.dispose()


async def test_migrate_adds_the_first_attempt_lateness_to_the_rows_already_stored(settings: StorageSettings) -> None:
    await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        lateness = tuple(1 if slot == 3 else 0 for slot in range(SLO_LATENESS_SLOTS))
        await store.add_slo_minutes(
            "n1", [SloMinute("a", HOUR * 60 + k, SloCounts(1, 1, lateness=lateness)) for k in range(90)]
        )
        await as_before_revision_0014(store, settings)

        with pytest.raises(StorageNotMigrated, match=rf"0013_slo_hours.*{HEAD_REVISION}.*tjobs migrate"):
            await store.check_layout()

        await migrate(settings)
        await store.check_layout()
        before = await store.sum_slo_minutes("a", HOUR * 60, HOUR * 60 + 90)  # an hour row and minutes
        assert (before.fires, before.lateness[3], sum(before.first_answer_lateness)) == (90, 90, 0)
        answered = tuple(1 if slot == 5 else 0 for slot in range(SLO_LATENESS_SLOTS))
        await store.add_slo_minutes("n1", [SloMinute("a", HOUR * 60 + 1, SloCounts(first_answer_lateness=answered))])
        after = await store.sum_slo_minutes("a", HOUR * 60, HOUR * 60 + 90)
        assert (after.fires, after.first_answer_lateness[5], sum(after.first_send_lateness)) == (90, 1, 0)
    finally:
        await store.close()
