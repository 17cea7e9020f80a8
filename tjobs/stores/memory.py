"""The in-memory twin of the SQL store: plain dicts, one process, the same contract suite.

Every method runs without awaiting in the middle of a change, so each call is atomic under asyncio
(the event loop is the lock). Records are copied in and out, as a database would.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from sharding import TaskIdGenerator, Topology, shard_of_task_id
from tjobs.errors import (
    Conflict,
    DuplicateKey,
    Fenced,
    NotFound,
    StorageUnavailable,
    TargetExists,
    TargetVersionConflict,
    TaskIdTaken,
    VersionConflict,
)
from tjobs.model import (
    App,
    DueTask,
    FireIntent,
    FireOutcome,
    Flow,
    FlowStatus,
    FlowUpdate,
    Task,
    TaskStatus,
)
from tjobs.stores.base import CountCorrection, FirePlanner, TaskStore
from tjobs.stores.flow_documents import attempt_log_from_text, attempt_log_to_text
from tjobs.stores.memory_accounts import MemoryAccounts
from tjobs.stores.memory_flow_pages import MemoryFlowPages
from tjobs.stores.memory_hot_changes import MemoryHotChangeLog, MemoryHotChanges
from tjobs.stores.memory_runs import MemoryRuns, is_stale, reschedule, write_flow
from tjobs.stores.memory_slo import MemorySlo
from tjobs.stores.queries import (
    FlowPosition,
    FlowQuery,
    TaskPosition,
    TaskQuery,
    flow_after,
    flow_rank,
    task_after,
    task_rank,
)
from tjobs.stores.schema import clip_error
from tjobs.stores.task_edits import check_fields, edited_row
from tjobs.stores.task_routing import check_task_shard
from tjobs.targets.model import Target

FlowKey = tuple[int, int]


def _task_copy(task: Task) -> Task:
    """A copy sharing nothing mutable: the payload goes through JSON, as the SQL store's does (far cheaper
    than ``copy.deepcopy``, which dominated an in-memory create); the specs are immutable and shared."""
    return replace(task, payload=_json_copy(task.payload))


def _json_copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class MemoryTaskStore(MemoryFlowPages, MemoryRuns, MemoryAccounts, MemorySlo, TaskStore):
    def __init__(self, topology: Topology | None = None) -> None:
        self.topology = topology or Topology()
        count = self.topology.shard_count
        self._tasks: list[dict[int, Task]] = [{} for _ in range(count)]
        self._flows: list[dict[FlowKey, Flow]] = [{} for _ in range(count)]
        self._keys: dict[tuple[str, str], int] = {}
        self._apps: dict[str, App] = {}
        self._slo_minutes, self._slo_hours = {}, {}
        self._targets: dict[tuple[str, str], Target] = {}
        # the task counts, changed with every task write as the SQL stores' rows are: (app, status, shard)
        self.task_counts: Counter[tuple[str, str, int]] = Counter()
        self._reconciled: Counter[int] = Counter()  # per shard: its reconciliations
        self.hot_changes = MemoryHotChanges()  # what the DB-poll hot tier's logs share (tests may empty it)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    def database_servers(self) -> list[str]:
        # Each topology instance is a server of its own here: one fire transaction each (commit_fires).
        return [f"memory-{instance}" for instance in range(self.topology.instances)]

    def server_of_shard(self, shard: int) -> str:
        return f"memory-{self.topology.locate(shard).instance}"

    async def database_now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def hot_change_log(self) -> MemoryHotChangeLog:
        return MemoryHotChangeLog(self.hot_changes)

    def _shard_of(self, task_id: int) -> int | None:
        if task_id <= 0:
            return None
        shard = shard_of_task_id(task_id)
        return shard if shard < self.topology.shard_count else None

    def _check_shard(self, shard: int) -> None:
        if not 0 <= shard < self.topology.shard_count:
            raise ValueError(f"shard {shard} is outside 0..{self.topology.shard_count - 1}")

    # ---- apps -------------------------------------------------------------------------------------

    async def put_app(self, app: App) -> None:
        for other in self._apps.values():
            if other.id != app.id and other.api_key_hash == app.api_key_hash:
                raise Conflict(f"another app already uses this API key hash ({app.id})")
        self._apps[app.id] = copy.deepcopy(app)

    async def get_app(self, app_id: str) -> App | None:
        app = self._apps.get(app_id)
        return None if app is None else copy.deepcopy(app)

    async def find_app_by_key_hash(self, api_key_hash: str) -> App | None:
        for app in self._apps.values():
            if app.api_key_hash == api_key_hash:
                return copy.deepcopy(app)
        return None

    async def list_apps(self) -> list[App]:
        return [copy.deepcopy(self._apps[key]) for key in sorted(self._apps)]

    async def delete_app(self, app_id: str) -> bool:
        return self._apps.pop(app_id, None) is not None

    # ---- targets ----------------------------------------------------------------------------------
    # Targets are frozen values (their mappings read-only), so they are shared, not copied.

    async def put_target(self, target: Target, expected_version: int | None) -> None:
        await asyncio.sleep(0)
        key = (target.app_id, target.name)
        stored = self._targets.get(key)
        if expected_version is None:
            if stored is not None:
                raise TargetExists(target.app_id, target.name)
        elif stored is None:
            raise NotFound("target", target.name)
        elif stored.version != expected_version:
            raise TargetVersionConflict(target.name, expected_version, stored.version)
        self._targets[key] = target

    async def get_target(self, app_id: str, name: str) -> Target | None:
        return self._targets.get((app_id, name))

    async def list_targets(self, app_id: str, after_name: str | None, limit: int) -> list[Target]:
        names = sorted(n for a, n in self._targets if a == app_id and (after_name is None or n > after_name))
        return [self._targets[(app_id, n)] for n in names[:limit]]

    async def delete_target(self, app_id: str, name: str) -> bool:
        return self._targets.pop((app_id, name), None) is not None

    async def count_target_references(self, app_id: str, name: str) -> int:
        # The twin scans (the SQL store reads reference rows; see TaskStore.count_target_references).
        return sum(
            1
            for shard in self._tasks
            for task in shard.values()
            if task.app_id == app_id and name in task.callback.targets and task.status is not TaskStatus.COMPLETED
        )

    # ---- tasks ------------------------------------------------------------------------------------

    def _routing(self, task: Task) -> int:
        return check_task_shard(task, self._shard_of(task.id), self.topology)

    def _insert(self, task: Task) -> Task:
        shard = self._routing(task)
        if task.key is not None and (task.app_id, task.key) in self._keys:
            raise DuplicateKey(task.app_id, task.key, self._keys[(task.app_id, task.key)])
        if task.id in self._tasks[shard]:
            raise TaskIdTaken(task.id)
        self._tasks[shard][task.id] = _task_copy(task)
        self._count(shard, task.app_id, None, task.status)
        if task.key is not None:
            self._keys[(task.app_id, task.key)] = task.id
        return _task_copy(task)

    async def insert_task(self, task: Task) -> Task:
        await asyncio.sleep(0)  # a real store yields here; let concurrent callers interleave
        return self._insert(task)

    async def insert_tasks(self, tasks: Sequence[Task]) -> list[Task | int | StorageUnavailable]:
        for task in tasks:
            self._routing(task)
        await asyncio.sleep(0)
        results: list[Task | int | StorageUnavailable] = []
        for task in tasks:
            while True:
                try:
                    results.append(self._insert(task))
                except DuplicateKey as duplicate:
                    results.append(duplicate.existing_task_id)
                except TaskIdTaken:
                    task.id = TaskIdGenerator.remint(task.id)
                    continue
                break
        return results

    def _get(self, task_id: int) -> Task | None:
        shard = self._shard_of(task_id)
        return None if shard is None else self._tasks[shard].get(task_id)

    async def get_task(self, task_id: int) -> Task | None:
        task = self._get(task_id)
        return None if task is None else _task_copy(task)

    async def find_task_by_key(self, app_id: str, key: str) -> Task | None:
        task_id = self._keys.get((app_id, key))
        return None if task_id is None else await self.get_task(task_id)

    async def update_task(self, task: Task, expected_version: int) -> Task:
        await asyncio.sleep(0)
        stored = self._get(task.id)
        if stored is None:
            raise NotFound("task", task.id)
        if stored.version != expected_version:
            raise VersionConflict(task.id, expected_version, stored.version)
        updated = replace(
            _task_copy(task),
            id=stored.id,
            app_id=stored.app_id,
            key=stored.key,
            created_at_ms=stored.created_at_ms,
            version=expected_version + 1,
            revision=stored.revision,
        )
        self._tasks[shard_of_task_id(task.id)][task.id] = updated
        self._count(shard_of_task_id(task.id), stored.app_id, stored.status, updated.status)
        return _task_copy(updated)

    async def edit_task(
        self,
        task: Task,
        fields: Collection[str],
        *,
        expected_revision: int | None = None,
        from_status: TaskStatus | None = None,
    ) -> Task:
        check_fields(fields)
        await asyncio.sleep(0)
        stored = self._get(task.id)
        if stored is None:
            raise NotFound("task", task.id)
        edited = edited_row(stored, _task_copy(task), fields, expected_revision, from_status)
        if edited is None:
            return _task_copy(stored)
        self._tasks[shard_of_task_id(task.id)][task.id] = edited
        self._count(shard_of_task_id(task.id), stored.app_id, stored.status, edited.status)
        return _task_copy(edited)

    async def delete_task(self, task_id: int) -> bool:
        shard = self._shard_of(task_id)
        if shard is None:
            return False
        task = self._tasks[shard].pop(task_id, None)
        if task is None:
            return False
        self._count(shard, task.app_id, task.status, None)
        if task.key is not None:
            self._keys.pop((task.app_id, task.key), None)
        return True

    async def delete_task_cancelling_flows(self, task_id: int, now_ms: int) -> bool:
        if not await self.delete_task(task_id):
            return False
        shard = self._shard_of(task_id)
        assert shard is not None
        for flow in self._flows[shard].values():
            if flow.task_id == task_id and flow.status is FlowStatus.PENDING:
                flow.status = FlowStatus.CANCELLED
                flow.next_attempt_at_ms = None
                flow.updated_at_ms = now_ms
        return True

    async def delete_app_tasks(self, app_id: str, shard: int, limit: int, now_ms: int) -> int:
        self._check_shard(shard)
        doomed = [t.id for t in self._tasks[shard].values() if t.app_id == app_id][:limit]
        for task_id in doomed:
            await self.delete_task_cancelling_flows(task_id, now_ms)
        return len(doomed)

    async def list_tasks(self, app_id: str, shard: int, after_id: int | None, limit: int) -> list[Task]:
        self._check_shard(shard)
        chosen = sorted(
            t.id for t in self._tasks[shard].values() if t.app_id == app_id and (after_id is None or t.id > after_id)
        )[:limit]
        return [_task_copy(self._tasks[shard][task_id]) for task_id in chosen]

    # ---- loading ----------------------------------------------------------------------------------

    async def load_due(
        self,
        shard: int,
        before_ms: int,
        limit: int,
        after: tuple[int, int] | None = None,
        skip: tuple[int, int] | None = None,
    ) -> list[DueTask]:
        self._check_shard(shard)
        due = sorted(
            (t.next_run_at_ms, t.id, t)
            for t in self._tasks[shard].values()
            if t.status is TaskStatus.ACTIVE
            and t.next_run_at_ms is not None
            and t.next_run_at_ms < before_ms
            and (skip is None or not skip[0] <= t.next_run_at_ms < skip[1])
            and (after is None or (t.next_run_at_ms, t.id) > after)
        )[:limit]
        return [DueTask(t.id, at, t.version, t.app_id, t.misfire_policy) for at, _, t in due]

    async def count_active(self, shard: int) -> int:
        self._check_shard(shard)
        active = TaskStatus.ACTIVE.value
        return max(0, sum(n for (_, status, of), n in self.task_counts.items() if of == shard and status == active))

    # ---- the fire transaction ---------------------------------------------------------------------

    async def commit_fires(
        self,
        intents: Sequence[FireIntent],
        now_ms: int,
        planner: FirePlanner,
        may_commit: Callable[[], bool] | None = None,
    ) -> list[FireOutcome]:
        await asyncio.sleep(0)
        # One transaction per topology instance (a database server in a cluster deployment).
        outcomes: list[FireOutcome] = [FireOutcome(intent, None, []) for intent in intents]
        by_instance: dict[int, list[int]] = {}
        for index, intent in enumerate(intents):
            shard = self._shard_of(intent.task_id)
            if shard is not None:  # an id outside the topology names no row: rejected
                by_instance.setdefault(self.topology.locate(shard).instance, []).append(index)
        errors: list[Exception] = []
        for indexes in by_instance.values():
            try:
                committed = self._fire_transaction([intents[i] for i in indexes], now_ms, planner, may_commit)
            except Exception as error:
                errors.append(error)
                for index in indexes:
                    outcomes[index] = FireOutcome(intents[index], None, [], error)
                continue
            for index, outcome in zip(indexes, committed, strict=True):
                outcomes[index] = outcome
        if errors and len(errors) == len(by_instance):
            raise errors[0]  # every transaction failed: nothing was written
        return outcomes

    def _fire_transaction(
        self,
        intents: list[FireIntent],
        now_ms: int,
        planner: FirePlanner,
        may_commit: Callable[[], bool] | None,
    ) -> list[FireOutcome]:
        # Plan everything first: a planner that raises leaves nothing changed.
        state: dict[int, Task] = {}
        written: set[FlowKey] = set()
        outcomes: list[FireOutcome] = []
        for intent in intents:
            task = state.get(intent.task_id) or self._get(intent.task_id)
            if (
                task is None
                or task.status is not TaskStatus.ACTIVE
                or task.next_run_at_ms != intent.scheduled_at_ms
                or task.version != intent.version
            ):
                outcomes.append(FireOutcome(intent, None, []))
                continue
            plan = planner(_task_copy(task), intent, now_ms)
            if plan is None:
                outcomes.append(FireOutcome(intent, None, []))
                continue
            after = replace(
                _task_copy(task),
                next_run_at_ms=plan.next_run_at_ms,
                status=plan.status,
                version=task.version + 1,
                fire_count=task.fire_count + plan.fires_added,
                updated_at_ms=now_ms,
            )
            state[task.id] = after
            shard_flows = self._flows[shard_of_task_id(task.id)]
            flows: list[Flow] = []
            for new in plan.flows:
                key = (task.id, new.scheduled_at_ms)
                if key in shard_flows or key in written:
                    continue  # invariant 2 (docs/design.md): never a second flow for one (task, instant)
                written.add(key)
                flows.append(new.flow_of(task, now_ms))
            outcomes.append(FireOutcome(intent, _task_copy(after), flows))
        if may_commit is not None and not may_commit():
            raise Fenced("the fence closed during the fire transaction; rolled back")
        for task_id, task in state.items():
            shard = shard_of_task_id(task_id)
            self._count(shard, task.app_id, self._tasks[shard][task_id].status, task.status)
            self._tasks[shard][task_id] = task
        for outcome in outcomes:
            for flow in outcome.flows:
                key = (flow.task_id, flow.scheduled_at_ms)
                self._flows[shard_of_task_id(flow.task_id)][key] = replace(flow)
        return outcomes

    # ---- flows --------------------------------------------------------------------------------------

    async def insert_manual_flow(self, task_id: int, flow: Flow) -> Flow:
        shard = self._shard_of(task_id)
        if shard is None:
            raise NotFound("task", task_id)
        stored = replace(flow, task_id=task_id, last_error=clip_error(flow.last_error))
        key = (task_id, stored.scheduled_at_ms)
        if key in self._flows[shard]:
            raise Conflict(f"flow {stored.id} already exists")
        self._flows[shard][key] = stored
        return replace(stored)

    async def record_flow_updates(self, updates: Sequence[FlowUpdate], now_ms: int) -> None:
        for update in updates:
            shard = self._shard_of(update.task_id)
            if shard is None:
                continue
            if update.reschedule is not None:
                reschedule(self._tasks[shard].get(update.task_id), update.reschedule, now_ms)
            flow = self._flows[shard].get((update.task_id, update.scheduled_at_ms))
            if flow is None:
                continue
            if flow.status.terminal:
                if update.status is FlowStatus.RUNNING and flow.attempts == update.attempts:
                    _record_send(flow, update)  # the run ended by a report before its start was written
                continue
            if not update.status.terminal and update.attempts < flow.attempts:
                continue  # outdated: written by a node that no longer delivers this flow
            if update.status is FlowStatus.RUNNING and not _may_start_run(flow, update.attempts):
                if flow.attempts == update.attempts:  # a report or a cancel came first: the send is history
                    _record_send(flow, update)
                continue  # a report or a cancel came first, or the attempt is over
            write_flow(flow, update, now_ms)
            flow.last_status_code = update.last_status_code  # a delivery's write: the attempt's answer too
            if update.routes is not None:
                flow.routes = update.routes
            if update.attempt_log is not None:
                flow.attempt_log = attempt_log_from_text(attempt_log_to_text(update.attempt_log))  # errors clipped
            if update.answers is not None:
                flow.answers = update.answers

    async def get_flow(self, task_id: int, scheduled_at_ms: int) -> Flow | None:
        shard = self._shard_of(task_id)
        flow = None if shard is None else self._flows[shard].get((task_id, scheduled_at_ms))
        return None if flow is None else replace(flow)

    async def search_flows(
        self, query: FlowQuery, reads: Mapping[int, FlowPosition | None], limit: int
    ) -> dict[int, list[Flow]]:
        found: dict[int, list[Flow]] = {}
        for shard, after in reads.items():  # the twin scans; the SQL store reads an index range
            self._check_shard(shard)
            chosen = sorted((f for f in self._matching(query, shard) if flow_after(f, after)), key=flow_rank)
            found[shard] = [replace(f) for f in chosen[:limit]]
        return found

    async def count_flows(self, query: FlowQuery, caps: Mapping[int, int]) -> dict[int, int]:
        for shard in caps:
            self._check_shard(shard)
        return {shard: min(cap, sum(1 for _ in self._matching(query, shard))) for shard, cap in caps.items()}

    def _matching(self, query: FlowQuery, shard: int) -> Iterator[Flow]:
        tasks = self._tasks[shard]
        return (f for f in self._flows[shard].values() if query.matches(f, tasks.get(f.task_id)))

    async def task_names(self, task_ids: Collection[int]) -> dict[int, str]:
        tasks = ((task_id, self._shard_of(task_id)) for task_id in task_ids)
        found = {task_id: self._tasks[shard].get(task_id) for task_id, shard in tasks if shard is not None}
        return {task_id: task.name for task_id, task in found.items() if task is not None}

    async def search_tasks(
        self, query: TaskQuery, reads: Mapping[int, TaskPosition | None], limit: int
    ) -> dict[int, list[Task]]:
        found: dict[int, list[Task]] = {}
        for shard, after in reads.items():
            self._check_shard(shard)
            chosen = sorted(
                (t for t in self._tasks[shard].values() if query.matches(t) and task_after(query, t, after)),
                key=lambda t: task_rank(query, t),
            )
            found[shard] = [_task_copy(t) for t in chosen[:limit]]
        return found

    async def redrive_flow(self, task_id: int, scheduled_at_ms: int, now_ms: int) -> Flow | None:
        shard = self._shard_of(task_id)
        flow = None if shard is None else self._flows[shard].get((task_id, scheduled_at_ms))
        if flow is None or flow.status is not FlowStatus.DEAD:
            return None
        flow.status = FlowStatus.PENDING
        flow.next_attempt_at_ms = now_ms
        flow.updated_at_ms = now_ms
        if flow.run_log_purged:  # its app's log retention purged it: the new runs' log starts empty
            flow.run_log_lines = 0
        return replace(flow)

    async def count_tasks(self, app_id: str, shard: int, status: TaskStatus | None = None) -> int:
        self._check_shard(shard)
        return sum(
            1 for t in self._tasks[shard].values() if t.app_id == app_id and (status is None or t.status is status)
        )

    def _count(self, shard: int, app_id: str, before: TaskStatus | None, after: TaskStatus | None) -> None:
        if before is after:
            return
        if before is not None:
            self.task_counts[(app_id, before.value, shard)] -= 1
        if after is not None:
            self.task_counts[(app_id, after.value, shard)] += 1

    async def read_task_counts(
        self, database_index: int, app_ids: Collection[str] | None = None
    ) -> dict[str, dict[str, int]]:
        await asyncio.sleep(0)
        shards = self.topology.shards_of_database(database_index)
        asked = None if app_ids is None else set(app_ids)
        counts: dict[str, dict[str, int]] = {}
        for (app_id, status, shard), n in self.task_counts.items():
            if shard in shards and (asked is None or app_id in asked):
                of_app = counts.setdefault(app_id, {})
                of_app[status] = of_app.get(status, 0) + n
        return counts

    async def reconcile_task_counts(self, shard: int) -> list[CountCorrection]:
        self._check_shard(shard)
        seen_marker = self._reconciled[shard]
        held = Counter({(app_id, status): n for (app_id, status, of), n in self.task_counts.items() if of == shard})
        tasks = Counter((task.app_id, task.status.value) for task in self._tasks[shard].values())
        await asyncio.sleep(0)  # the SQL stores' count takes a while: writers run meanwhile
        if self._reconciled[shard] != seen_marker:
            return []  # another reconciliation of this table came first
        self._reconciled[shard] += 1
        found = [
            CountCorrection(app_id, status, tasks[(app_id, status)] - held[(app_id, status)])
            for app_id, status in sorted({*held, *tasks})
            if tasks[(app_id, status)] != held[(app_id, status)]
        ]
        for correction in found:
            self.task_counts[(correction.app_id, correction.status, shard)] += correction.by
        for key in [key for key, n in self.task_counts.items() if key[2] == shard and n == 0]:
            del self.task_counts[key]
        return found

    async def count_dead_letters(self, database_index: int, app_ids: Sequence[str]) -> dict[str, int]:
        await asyncio.sleep(0)
        counts = dict.fromkeys(app_ids, 0)
        for shard in self.topology.shards_of_database(database_index):
            for flow in self._flows[shard].values():
                if flow.status is FlowStatus.DEAD and flow.app_id in counts:
                    counts[flow.app_id] += 1
        return counts

    async def count_rows(self, database_index: int) -> dict[str, int]:
        await asyncio.sleep(0)
        shards = self.topology.shards_of_database(database_index)
        return {
            "tasks": sum(len(self._tasks[shard]) for shard in shards),
            "flows": sum(len(self._flows[shard]) for shard in shards),
        }

    async def shards_with_stale_flows(self, shards: Sequence[int], now_ms: int) -> set[int]:
        for shard in shards:
            self._check_shard(shard)
        return {shard for shard in shards if any(is_stale(f, now_ms) for f in self._flows[shard].values())}

    async def lease_stale_flows(
        self, shard: int, now_ms: int, lease_ms: int, limit: int, *, held: Callable[[str], int | None] | None = None
    ) -> list[tuple[Flow, Task | None]]:
        self._check_shard(shard)
        stale = sorted((f.next_attempt_at_ms, key) for key, f in self._flows[shard].items() if is_stale(f, now_ms))[
            :limit
        ]
        leased: list[tuple[Flow, Task | None]] = []
        for _, key in stale:
            flow = self._flows[shard][key]
            held_until = None if held is None else held(flow.id)
            flow.next_attempt_at_ms = max(now_ms + lease_ms, held_until or 0)
            task = self._tasks[shard].get(flow.task_id)
            if task is not None and flow.status is FlowStatus.PENDING and held_until is None:
                flow.attempts += 1
            leased.append((replace(flow), None if task is None else _task_copy(task)))
        return leased

    # ---- retention ----------------------------------------------------------------------------------

    async def purge(self, shard: int, finished_before_ms: int, limit: int) -> int:
        self._check_shard(shard)
        if limit <= 0:
            return 0
        flows = self._flows[shard]
        old_flows = sorted(
            (key for key, f in flows.items() if f.status.terminal and f.scheduled_at_ms < finished_before_ms),
            key=lambda key: (key[1], key[0]),
        )[:limit]  # oldest first, as the SQL stores read them
        for key in old_flows:
            del flows[key]
        room = limit - len(old_flows)
        tasks = self._tasks[shard]
        old_tasks = sorted(
            (t for t in tasks.values() if t.status is TaskStatus.COMPLETED and t.updated_at_ms < finished_before_ms),
            key=lambda t: (t.updated_at_ms, t.id),
        )[: max(room, 0)]  # oldest first, as the SQL stores read them (tasks_TT_done)
        for task in old_tasks:
            del tasks[task.id]
            self._count(shard, task.app_id, task.status, None)
            if task.key is not None:
                self._keys.pop((task.app_id, task.key), None)
        return len(old_flows) + len(old_tasks)


def _may_start_run(flow: Flow, attempt: int) -> bool:
    """Whether attempt ``attempt``'s run may start on ``flow``: it is still being delivered (``pending``
    with fewer attempts made, or ``sending`` it, at most once), not already taken by a report, a cancel
    or a later attempt."""
    if flow.status is FlowStatus.PENDING:
        return flow.attempts < attempt
    return flow.status is FlowStatus.SENDING and flow.attempts <= attempt


def _record_send(flow: Flow, update: FlowUpdate) -> None:
    """The send of a run's start that a report or a cancel overtook: in the history, nothing else."""
    flow.last_status_code = update.last_status_code
    if update.attempt_log is not None:
        flow.attempt_log = attempt_log_from_text(attempt_log_to_text(update.attempt_log))
    if update.answers is not None:
        flow.answers = update.answers
