"""Search across shards at scale: task and flow searches over many stored tasks and flows (issue 16).

::

    python -m benchmarks search --storage mysql+asyncmy://root@127.0.0.1:3306 --tasks 1000000 --flows-per-task 10

It migrates a fresh ``tjbench_<hex>`` prefix (topology 8x4x16, 512 shards; dropped afterwards unless
``--keep``), writes ``--tasks`` tasks of ``--apps`` apps (names ``order-<n>``, every status and kind)
and ``--flows-per-task`` flows each (every status, instants over a week), straight into the shard
tables, then times :class:`tjobs.service.search.SearchService` (the store and the merge, no HTTP):
each search's first page and a page ``--depth`` pages in, ``--samples`` times, p50, p99 and max in ms.
With ``--console`` it then starts a node on the same databases (admin key only, in this process) and
times every console page the same way (:func:`console_pages`: signed in as the admin, over HTTP on
loopback, the HTML rendered; the task and flow pages are the ones the lists link to).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks._shard_rows import write_shard_rows
from benchmarks.report import percentile
from sharding import TaskIdGenerator, shard_for_key
from testkit import run_node
from testkit.databases import drop_databases
from tjobs.model import App, DeliveryMode, FlowKind, FlowStatus, MisfirePolicy, Task, TaskStatus
from tjobs.service.cursors import Page
from tjobs.service.flow_filters import FlowFilters
from tjobs.service.search import SearchService
from tjobs.settings import StorageSettings, load_settings
from tjobs.specs import AtSpec, CallbackSpec, CronSpec, IntervalSpec, ScheduleKind, ScheduleSpec
from tjobs.stores.migrate import migrate
from tjobs.stores.queries import TaskQuery
from tjobs.stores.sqlalchemy import SQLAlchemyTaskStore

NOW_MS = 1_800_000_000_000
WEEK_MS = 7 * 86_400_000
SCHEDULES: tuple[ScheduleSpec, ...] = (
    IntervalSpec(60_000, NOW_MS),
    CronSpec("0 9 * * *", "Asia/Shanghai"),
    AtSpec(NOW_MS + 3_600_000),
)


def _task(task_id: int, app_id: str, n: int, key: str | None = None) -> Task:
    return Task(
        task_id,
        app_id,
        f"order-{n}",
        key,
        SCHEDULES[n % len(SCHEDULES)],
        CallbackSpec(("https://receiver.example/hook",)),
        {"n": n},
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        list(TaskStatus)[n % 3],
        NOW_MS,
        1,
        0,
        NOW_MS,
        NOW_MS,
    )


async def seed(
    store: SQLAlchemyTaskStore, settings: StorageSettings, tasks: int, flows_per_task: int, apps: int
) -> list[Task]:
    """Write the tasks and their flows shard by shard, ``BATCH`` rows a statement; return a sample."""
    rng = random.Random(1)
    engines: dict[str, AsyncEngine] = {}
    shards = store.topology.shard_count
    statuses = list(FlowStatus)
    sample: list[Task] = []
    per_shard = -(-tasks // shards)
    for shard in range(shards):
        home = store.layout.shards[shard]
        made = [
            _task((((n + 1) << 10 | shard) << 12) | rng.randrange(4096), f"app-{n % apps}", n)
            for n in range(shard * per_shard, min(tasks, (shard + 1) * per_shard))
        ]
        if not made:
            continue
        sample.append(made[0])
        flows = [
            {
                "task_id": task.id,
                "scheduled_at": NOW_MS - rng.randrange(WEEK_MS),
                "app_id": task.app_id,
                "kind": FlowKind.SCHEDULED.value,
                "status": statuses[rng.randrange(len(statuses))].value,
                "attempts": rng.randrange(3),
                "missed": 0,
                "created_at": NOW_MS,
                "updated_at": NOW_MS,
            }
            for task in made
            for _ in range(flows_per_task)
        ]
        unique = {(f["task_id"], f["scheduled_at"]): f for f in flows}
        await write_shard_rows(engines, settings, home, made, list(unique.values()))
    for engine in engines.values():
        await engine.dispose()
    return sample


async def timed(samples: int, call: Callable[[], Awaitable[Any]]) -> tuple[float, float, float]:
    """``call`` ``samples`` times, one after another: p50, p99 (nearest rank) and max in ms."""
    spent: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        spent.append((time.perf_counter() - started) * 1000)
    spent.sort()
    return percentile(spent, 50) or 0.0, percentile(spent, 99) or 0.0, spent[-1]


CONSOLE_ADMIN_KEY = "search-bench-admin-key-0123456789abcdef"
PREVIEWED_SCHEDULE = '{"kind": "cron", "expr": "0 9 * * *", "timezone": "Asia/Shanghai"}'
CONSOLE_PAGES: tuple[tuple[str, str], ...] = (
    ("console overview", "/console/"),
    ("console overview app", "/console/?app=app-1"),
    ("console tasks", "/console/tasks?app=app-1"),
    ("console tasks by name", "/console/tasks?app=app-1&name_prefix=order-12"),
    ("console tasks paused", "/console/tasks?app=app-1&status=paused"),
    ("console flows", "/console/flows?app=app-1"),
    ("console flows dead", "/console/flows?app=app-1&status=dead"),
    ("console flows retrying", "/console/flows?app=app-1&status=retrying"),
    ("console dead letters", "/console/dead-letters?app=app-1"),
    ("console apps", "/console/apps"),
    ("console app", "/console/apps/app-1"),
    ("console targets", "/console/targets?app=app-1"),
    ("console cluster", "/console/cluster"),
    ("console preview", "/console/schedules/preview?" + urlencode({"schedule": PREVIEWED_SCHEDULE})),
)
TASK_LINK = re.compile(r'href="(/console/tasks/[0-9A-Za-z_-]+)"')
FLOW_LINK = re.compile(r'href="(/console/flows/[0-9A-Za-z_-]+)"')


def linked_pages(tasks_page: str, task_page: str) -> tuple[tuple[str, str], ...]:
    """The pages an operator opens from a list, found by their links: the first task of the tasks page,
    its flows fragment, and the first flow on that task's page."""
    task = TASK_LINK.search(tasks_page)
    flow = FLOW_LINK.search(task_page)
    if task is None or flow is None:
        raise RuntimeError("no task or flow link on the console's pages")
    return (
        ("console task", task.group(1)),
        ("console task flows", task.group(1) + "/flows"),
        ("console flow", flow.group(1)),
    )


async def console_pages(storage: StorageSettings, samples: int) -> None:
    """Start a node on ``storage`` (the app ``app-1`` registered if missing), sign in as the admin and
    time each of :data:`CONSOLE_PAGES` and the task and flow pages linked from them (p50, p99 and max in
    ms, every answer a 200)."""
    settings = load_settings(None, storage=storage.model_dump(), api={"admin_key": CONSOLE_ADMIN_KEY})
    async with run_node(settings) as running, httpx.AsyncClient(base_url=running.base_url, timeout=60) as client:
        if await running.node.store.get_app("app-1") is None:
            await running.node.store.put_app(App("app-1", "app-1", secrets.token_hex(32), [secrets.token_hex(16)]))
        form = await client.get("/console/signin")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        if token is None:
            raise RuntimeError("no sign-in form")
        await client.post("/console/signin", data={"key": CONSOLE_ADMIN_KEY, "csrf": token.group(1)})

        async def get(path: str) -> str:
            answer = await client.get(path)
            if answer.status_code != 200:
                raise RuntimeError(f"{path}: {answer.status_code}")
            return answer.text

        tasks_page = await get("/console/tasks?app=app-1&status=active")
        task = TASK_LINK.search(tasks_page)
        if task is None:
            raise RuntimeError("no task link on the console's tasks page")
        pages = CONSOLE_PAGES + linked_pages(tasks_page, await get(task.group(1)))
        print(f"{'console page':<22} {'p50':>10} {'p99':>10} {'max':>10}")
        for name, path in pages:
            p50, p99, most = await timed(samples, functools.partial(get, path))
            print(f"{name:<22} {p50:>10.1f} {p99:>10.1f} {most:>10.1f}")


async def run(args: argparse.Namespace) -> None:
    prefix = args.reuse or f"tjbench_{secrets.token_hex(3)}"
    settings = StorageSettings(urls=[args.storage], topology="8x4x16", database_prefix=prefix)
    if not args.reuse:  # a reused prefix must exist already: never create it on whatever answers the URL
        await migrate(settings)
    store = SQLAlchemyTaskStore(settings)
    await store.start()
    try:
        search = SearchService(store, store.topology)
        if args.reuse:
            print(f"reusing {prefix} (seeded by an earlier --keep run; --tasks and --flows-per-task ignored)")
            task = (await search.tasks(TaskQuery("app-3"), limit=1)).items[0]
        else:
            started = time.perf_counter()
            sample = await seed(store, settings, args.tasks, args.flows_per_task, args.apps)
            seeded_s = time.perf_counter() - started
            print(f"seeded {args.tasks:,} tasks, {args.tasks * args.flows_per_task:,} flows in {seeded_s:.0f} s")
            task = sample[len(sample) // 2]
        print(f"databases: {prefix}_00..{prefix}_31")
        if not (await search.tasks(TaskQuery("app-1", key="bench-key"), limit=1)).items:
            key_shard = shard_for_key("app-1", "bench-key", store.topology.shard_count)
            minted = TaskIdGenerator(store.topology.shard_count).mint(key_shard, NOW_MS)
            await store.insert_task(_task(minted, "app-1", -1, "bench-key"))

        async def deep(first: Callable[[str | None], Awaitable[Page]]) -> None:
            cursor = None
            for _ in range(args.depth):
                page = await first(cursor)
                cursor = page.next_cursor
                if cursor is None:
                    return

        cases: list[tuple[str, Callable[[str | None], Awaitable[Page]]]] = [
            ("tasks newest", lambda c: search.tasks(TaskQuery("app-1"), limit=args.limit, cursor=c)),
            (
                "tasks name order-12",
                lambda c: search.tasks(TaskQuery("app-1", name_prefix="order-12"), limit=args.limit, cursor=c),
            ),
            (
                "tasks paused",
                lambda c: search.tasks(TaskQuery("app-1", status=TaskStatus.PAUSED), limit=args.limit, cursor=c),
            ),
            (
                "tasks cron",
                lambda c: search.tasks(TaskQuery("app-1", kind=ScheduleKind.CRON), limit=args.limit, cursor=c),
            ),
            ("task by key", lambda c: search.tasks(TaskQuery("app-1", key="bench-key"), limit=args.limit, cursor=c)),
            ("flows newest", lambda c: search.flows("app-1", limit=args.limit, cursor=c)),
            ("flows dead", lambda c: search.flows("app-1", FlowFilters(status="dead"), limit=args.limit, cursor=c)),
            (
                "flows retrying",
                lambda c: search.flows("app-1", FlowFilters(status="retrying"), limit=args.limit, cursor=c),
            ),
            (
                "flows of a task",
                lambda c: search.flows(task.app_id, FlowFilters(task_id=task.id), limit=args.limit, cursor=c),
            ),
            (
                "flows last hour",
                lambda c: search.flows(
                    "app-1", FlowFilters(from_ms=NOW_MS - 3_600_000, until_ms=NOW_MS), limit=args.limit, cursor=c
                ),
            ),
        ]
        print(
            f"{'search':<22} {'first p50':>10} {'first p99':>10} {'max':>8} {f'page {args.depth} p50':>12} {'p99':>8}"
        )
        for name, first in cases:
            p50, p99, most = await timed(args.samples, functools.partial(first, None))
            d50, d99, _ = await timed(max(1, args.samples // args.depth), functools.partial(deep, first))
            print(
                f"{name:<22} {p50:>10.1f} {p99:>10.1f} {most:>8.1f} {d50 / args.depth:>12.1f} {d99 / args.depth:>8.1f}"
            )
        if args.console:
            await console_pages(settings, args.samples)
    finally:
        await store.close()
        if not args.keep and not args.reuse:
            drop_databases(settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks search", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--storage", required=True, help="a MariaDB URL (mysql+asyncmy://...) or a SQLite directory URL"
    )
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--flows-per-task", type=int, default=10)
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--limit", type=int, default=50, help="items per page")
    parser.add_argument("--samples", type=int, default=100, help="timed first pages per search")
    parser.add_argument("--depth", type=int, default=10, help="pages walked for the deep figure (per page)")
    parser.add_argument("--keep", action="store_true", help="keep the databases (named in the output)")
    parser.add_argument("--console", action="store_true", help="also time every console page")
    parser.add_argument(
        "--reuse", metavar="PREFIX", help="time the searches over a prefix kept by an earlier --keep run (no seeding)"
    )
    args = parser.parse_args(argv)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
