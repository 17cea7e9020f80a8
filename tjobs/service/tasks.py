"""Task operations behind the API: validate, route by shard, store, and hand near-term changes to the wheel.

Every change that could move, stop or start a fire is published to the hot tier after it commits, so
the owning node's wheel sees it before the task's instant (the fire CAS covers any race).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from sharding import TaskIdGenerator, Topology, shard_for_key, shard_of_task_id
from tjobs.clock import Clock
from tjobs.cluster.limit_shares import SOLE_NODE, Membership, quota_share, quota_share_allows
from tjobs.delivery.ssrf import TargetGuard, allow_list_of_app, target_field
from tjobs.errors import (
    Conflict,
    DuplicateKey,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    StorageUnavailable,
    TjobsError,
    known_object,
)
from tjobs.hot_tier.base import HotTier, TaskChange
from tjobs.model import App, Flow, FlowKind, FlowStatus, Task, TaskHealth, TaskStatus, parse_flow_id
from tjobs.observability.observer import NO_OBSERVER, FireObserver
from tjobs.schedules.parsing import parse_schedule_request, schedule_of
from tjobs.service import audit_scope
from tjobs.service.child_links import ChildLinks
from tjobs.service.child_tasks import parse_children
from tjobs.service.cursors import LIST_PAGE_MAX as LIST_PAGE_MAX  # re-exported: the listings' bound
from tjobs.service.cursors import Page
from tjobs.service.search import SearchService
from tjobs.service.targets import TargetService
from tjobs.service.task_batches import BatchShapes
from tjobs.service.task_count_reconciler import TaskCountReconciler
from tjobs.service.task_counts import TaskCounts
from tjobs.service.task_health import health_of_page
from tjobs.service.validation import (
    check_fixed_delay_policy,
    check_key,
    check_name,
    check_payload,
    parse_callback_request,
    parse_delivery,
    parse_misfire_policy,
)
from tjobs.settings import Settings
from tjobs.specs import CallbackSpec, ScheduleKind, ScheduleSpec
from tjobs.specs.calendar import CalendarLookup, CalendarRules
from tjobs.stores.base import TaskStore
from tjobs.stores.contracts.runs import RunWrite
from tjobs.stores.contracts.task_parents import TaskParentRecords
from tjobs.stores.queries import TaskQuery
from tjobs.targets.model import RetryPolicy, pick_budget
from tjobs.wire import TaskCreate, TaskTrigger, TaskUpdate

logger = logging.getLogger(__name__)

_CREATE_KEYS = frozenset(TaskCreate.model_fields)
_TRIGGER_KEYS = frozenset(TaskTrigger.model_fields)
_CREATE_REQUIRED = tuple(name for name, field in TaskCreate.model_fields.items() if field.is_required())
_UPDATE_KEYS = frozenset(TaskUpdate.model_fields)
MAX_INSERT_ATTEMPTS = 3
MAX_BATCH = 1000
SHARD_WINDOW = 16  # shards read concurrently while walking them in order


Redriven = tuple[str, Flow | None, TjobsError | None]


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~0.7 us, one per task of a batch
class ItemResult:
    """One item of a batch: ``task`` (``created`` says if new) or ``error`` (code, message, field)."""

    task: Task | None
    created: bool
    error: TjobsError | None


@dataclass(frozen=True, slots=True)
class Created:
    task: Task
    created: bool  # False when an existing task with the same (app, key) was returned


class TaskService:
    def __init__(
        self,
        store: TaskStore,
        hot_tier: HotTier,
        settings: Settings,
        clock: Clock,
        topology: Topology,
        flow_sink: Callable[[Task, Flow], None] | None = None,
        targets: TargetService | None = None,
        unreachable_shards: Callable[[], frozenset[int]] | None = None,
        observer: FireObserver = NO_OBSERVER,
        membership: Callable[[], Membership] = lambda: SOLE_NODE,
        calendars: CalendarLookup | None = None,
        parents: TaskParentRecords | None = None,
    ) -> None:
        """``flow_sink`` delivers the flows this service commits itself (a manual trigger, a dead
        letter re-driven): the deliverer's :meth:`tjobs.delivery.deliverer.Deliverer.deliver`.
        ``targets`` checks that the targets a callback names exist (without it, naming one is a 422).
        ``unreachable_shards`` names the shards whose database server this node knows to be down
        (:meth:`tjobs.cluster.db_health.DatabaseHealth.paused_shards`): a create landing on one is
        refused at once with :class:`StorageUnavailable`, before anything is sent. ``observer`` hears
        of every dead letter re-driven (the service levels count a flow dead once). ``membership``
        (:meth:`tjobs.cluster.base.Coordinator.membership`) gives this node's share of each app's quota.
        ``calendars`` answers an app's calendar by name (:meth:`tjobs.service.calendars.CalendarService.rules`):
        a schedule naming one the node does not know is a 422 (without it, naming one is). ``parents``, the
        reverse index of child tasks (:mod:`tjobs.service.child_links`)."""
        self._store = store
        self._hot_tier = hot_tier
        self._settings = settings
        self._clock = clock
        self._topology = topology
        self._observer = observer
        self._membership = membership
        self._calendars = calendars
        self.child_links = ChildLinks(store, parents, self._routable, settings.storage.create_timeout_s)
        self._in_flight: Counter[str] = Counter()  # per app: tasks being stored, held against its quota
        # the shard of a task without a key, and an id's random bits, only need to be uniform, not
        # unpredictable: a PRNG seeded from the OS instead of secrets (a syscall per task in a batch)
        self._shards = random.Random()
        self._ids = TaskIdGenerator(topology.shard_count, self._shards.getrandbits)
        self._threshold_ms = int(settings.scheduler.misfire_threshold_s * 1000)
        self._flow_sink = flow_sink
        self._targets = targets
        self._unreachable_shards = unreachable_shards
        self.guard = TargetGuard(allow_loopback=settings.allow_loopback_callbacks)
        self.counts = TaskCounts(store, clock, settings.limits.task_count_refresh_s)
        self.reconciler = TaskCountReconciler(store, settings.limits.task_count_reconcile_step_s, membership)
        self.search = SearchService(store, topology)  # tasks and flows across every shard

    # ---- create ---------------------------------------------------------------------------------

    def build(self, app: App, request: Any, now_ms: int, shapes: BatchShapes | None = None) -> Task:
        """Validate a create request and build the task it describes (not stored yet); ``shapes``: what
        the tasks of its batch share, parsed once per batch (:mod:`tjobs.service.task_batches`)."""
        known_object(request, _CREATE_KEYS)
        for required in _CREATE_REQUIRED:
            if required not in request:
                raise InvalidInput(required, "is required", "missing")
        name = check_name(request["name"])
        key = check_key(request.get("key"))
        limits = self._settings.limits
        schedule = parse_schedule_request(
            request["schedule"], now_ms=now_ms, limits=limits, misfire_threshold_ms=self._threshold_ms
        )
        if shapes is None:
            callback = parse_callback_request(with_defaults(request["callback"], app), limits)
        else:
            callback = shapes.callback(request["callback"])
        payload = request.get("payload")
        check_payload(payload, limits)
        default_of = self._settings.default_misfire_policy if shapes is None else shapes.default_policy
        policy = parse_misfire_policy(request.get("misfire_policy"), default_of(schedule.kind))
        check_fixed_delay_policy(schedule, policy)
        delivery = parse_delivery(request.get("delivery"))
        children = parse_children(request.get("children"))
        calendar = self.calendar_of(app.id, schedule)
        first_fire = schedule_of(schedule, calendar=calendar).first_fire(now_ms)
        if first_fire is None:
            raise InvalidInput("schedule", "never fires", "never_fires")
        shards = self._topology.shard_count
        if key:
            shard = shard_for_key(app.id, key, shards)
        else:
            shard = self._shards.randrange(shards) if shapes is None else shapes.keyless_shard()
        task_id = self._ids.mint(shard, now_ms)
        if getattr(schedule, "jitter_ms", None):  # its instants are seeded by the id (tjobs.schedules.jitter)
            first_fire = schedule_of(schedule, task_id, calendar).first_fire(now_ms)
        # fmt: off
        return Task(  # positional, in Task's field order: half the cost of 16 keywords, paid per task of a batch
            task_id, app.id, name, key, schedule, callback, payload, policy, delivery, TaskStatus.ACTIVE, first_fire,
            1, 0, now_ms, now_ms, 1, children,  # version, fire_count, created_at_ms, updated_at_ms, revision
        )
        # fmt: on

    async def create(self, app: App, request: Any) -> Created:
        now_ms = self._clock.now_ms()
        task = self.build(app, request, now_ms)
        await self.check_targets(app, task.callback, request["callback"])
        await self.child_links.check_and_link(app, task.id, task.children)
        with self._quota_held(app, 1):
            self._check_reachable(shard_of_task_id(task.id))
            return await self._insert_one(app, task, now_ms)

    async def _insert_one(self, app: App, task: Task, now_ms: int) -> Created:
        for _ in range(MAX_INSERT_ATTEMPTS):
            try:
                begun = self.counts.epoch()
                stored = await self._store.insert_task(task)
                self.counts.changed(app.id, None, stored.status, begun)
            except DuplicateKey as duplicate:
                existing = await self._store.get_task(duplicate.existing_task_id)
                if existing is None:  # deleted between the insert and the read: try again
                    continue
                return Created(existing, created=False)
            except Conflict:
                # A task id another node minted too (1 in 4,096 per millisecond and shard): mint another one.
                task_id = self._ids.mint(shard_of_task_id(task.id), self._clock.now_ms())
                reminted(task, task_id, now_ms, self.calendar_of(app.id, task.schedule))
                continue
            await self._hot_tier.publish(TaskChange.of(stored))
            return Created(stored, created=True)
        raise Conflict(f"could not store task {task.name!r}; retry")

    def calendar_of(self, app_id: str, schedule: ScheduleSpec) -> CalendarRules | None:
        """The rules of the calendar ``schedule`` names (``None`` if it names none); a 422 naming
        ``schedule.calendar`` when the app has no calendar of that name (as this node knows them: a
        calendar written on another node is known here within ``scheduler.calendar_refresh_s``)."""
        name = getattr(schedule, "calendar", None)
        if name is None:
            return None
        rules = None if self._calendars is None else self._calendars(app_id, name)
        if rules is None:
            raise InvalidInput("schedule.calendar", f"the app has no calendar named {name!r}", "unknown_calendar")
        return rules

    async def check_targets(self, app: App, callback: CallbackSpec, request: Any = None) -> None:
        """The SSRF policy at registration: 422 naming the URL field if a URL is refused; and for a
        callback naming targets, 422 naming the field of a name the app has no target of
        (``request`` is the callback as sent, to name ``target`` or ``targets[i]``)."""
        if callback.targets:
            if self._targets is None:
                raise InvalidInput("callback.target", "named targets are not available on this node", "unknown_target")
            unicast = isinstance(request, dict) and "target" in request
            await self._targets.check_named(app, callback.targets, unicast, run_on_publish=callback.run_on_publish)
            return
        await self.guard.check_registration(callback.urls, allow_list_of_app(app.settings))

    async def create_many(self, app: App, requests: Any) -> list[ItemResult]:
        """Create up to :data:`MAX_BATCH` tasks; one result per item, in order (an invalid item
        does not stop the others). Valid items are stored in one batch (a transaction per database)."""
        if not isinstance(requests, list):
            raise InvalidInput("tasks", "must be a list of task create requests")
        if not 1 <= len(requests) <= MAX_BATCH:
            raise InvalidInput("tasks", f"must hold 1..{MAX_BATCH} items", "batch_size")
        now_ms = self._clock.now_ms()
        results: list[ItemResult | None] = [None] * len(requests)
        built: list[tuple[int, Task]] = []
        ids: set[int] = set()
        judged: dict[str, str | None] = {}  # url -> why it is refused (None: allowed), once per batch
        named: set[tuple[tuple[str, ...], bool]] = set()  # target names (and run_on_publish) found, once per batch
        limits = self._settings.limits
        shapes = BatchShapes(
            lambda callback: parse_callback_request(with_defaults(callback, app), limits),
            functools.partial(self._shards.randrange, self._topology.shard_count),
            self._settings.default_misfire_policy,
        )
        for index, request in enumerate(requests):
            try:
                task = self.build(app, request, now_ms, shapes)
                checked = (task.callback.targets, task.callback.run_on_publish)
                if task.callback.targets and checked not in named:
                    await self.check_targets(app, task.callback, request["callback"])
                    named.add(checked)
                if task.children:  # (no coroutine per task without children)
                    await self.child_links.check_and_link(app, task.id, task.children)
                urls = task.callback.urls
                for position, url in enumerate(urls):
                    if url not in judged:
                        judged[url] = await self.guard.refusal(url, allow_list_of_app(app.settings))
                    reason = judged[url]
                    if reason is not None:
                        field = "callback.url" if len(urls) == 1 else target_field(position)
                        raise InvalidInput(field, f"callback target refused: {reason}", "target_refused")
            except InvalidInput as error:
                error.field = f"tasks[{index}].{error.field}"
                error.message = f"{error.field}: {error.message.partition(': ')[2]}"
                results[index] = ItemResult(None, False, error)
                continue
            while task.id in ids:
                reminted(
                    task,
                    self._ids.mint(shard_of_task_id(task.id), now_ms),
                    now_ms,
                    self.calendar_of(app.id, task.schedule),
                )
            try:
                self._check_reachable(shard_of_task_id(task.id))
            except StorageUnavailable as error:
                results[index] = ItemResult(None, False, error)
                continue
            ids.add(task.id)
            built.append((index, task))
        if built:
            with self._quota_held(app, len(built)):
                begun = self.counts.epoch()
                stored = await self._insert_many([t for _, t in built])
                existing_ids = [r for r in stored if isinstance(r, int)]
                existing = dict(
                    zip(
                        existing_ids,
                        await asyncio.gather(*(self._store.get_task(i) for i in existing_ids)),
                        strict=True,
                    )
                )
                created: list[Task] = []
                for (index, _), outcome in zip(built, stored, strict=True):
                    if isinstance(outcome, StorageUnavailable):  # its server: nothing stored, or unknown
                        results[index] = ItemResult(None, False, outcome)
                    elif isinstance(outcome, int):
                        found = existing.get(outcome)
                        if found is None:
                            results[index] = ItemResult(
                                None, False, Conflict("the task with this key was deleted meanwhile; retry")
                            )
                        else:
                            results[index] = ItemResult(found, False, None)
                    else:
                        created.append(outcome)
                        results[index] = ItemResult(outcome, True, None)
                for task in created:  # reported while still held against the quota
                    self.counts.changed(app.id, None, task.status, begun)
            await self._hot_tier.publish_many([TaskChange.of(task) for task in created])  # in order
        return [r for r in results if r is not None]

    async def _insert_many(self, tasks: list[Task]) -> list[Task | int | StorageUnavailable]:
        # Not retried here: the store settles taken ids item by item, and a failure after some items
        # were committed must reach the client (keys make its retry idempotent), not store them twice.
        return await self._store.insert_tasks(tasks)

    def _check_reachable(self, shard: int) -> None:
        """Refuse a create whose shard's database server this node knows is down (nothing is sent)."""
        if self._unreachable_shards is not None and shard in self._unreachable_shards():
            raise StorageUnavailable(
                f"the database server holding shard {shard} is unreachable from this node; nothing was "
                f"stored; retry after {StorageUnavailable.retry_after_s} s"
            )

    # ---- quota ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _quota_held(self, app: App, adding: int) -> Iterator[None]:
        """Check the app's quota for ``adding`` tasks and hold them against it while they are stored (until
        :meth:`TaskCounts.changed` counts those stored), so concurrent creates on this node cannot pass one
        check together."""
        self._check_quota(app, adding)
        self._in_flight[app.id] += adding
        try:
            yield
        finally:
            self._in_flight[app.id] -= adding
            if not self._in_flight[app.id]:
                del self._in_flight[app.id]

    def _check_quota(self, app: App, adding: int) -> None:
        """The app's active-task quota, held across the cluster: this node's share of the room its last
        read left (:mod:`tjobs.service.task_counts`, :func:`tjobs.cluster.limit_shares.quota_share_allows`)."""
        quota = int(app.settings.get("max_active_tasks") or self._settings.limits.max_active_tasks_per_app)
        if quota <= 0:
            return
        counted, own_since = self.counts.active_split(app.id)
        own_since += self._in_flight.get(app.id, 0)
        membership = self._membership()
        if quota_share_allows(quota, counted, own_since, adding, app.id, membership):
            return
        active = max(0, counted + own_since)
        if active + adding <= quota:  # room left in the cluster, but not in this node's share of it
            self.counts.refresh_soon()  # a fresh read re-divides what is left
            raise QuotaExceeded(
                f"app {app.id} has about {active} active tasks; its quota is {quota}, and this node's share "
                f"of the room left ({quota_share(quota - counted, app.id, membership)} of "
                f"{quota - counted}, over {membership.nodes} nodes) is taken until the next read of its counts"
            )
        raise QuotaExceeded(f"app {app.id} has {active} active tasks; its quota is {quota}")

    # ---- list ---------------------------------------------------------------------------------

    async def list_tasks(
        self,
        app: App,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: TaskStatus | None = None,
        kind: str | None = None,
        name_prefix: str | None = None,
        key: str | None = None,
    ) -> Page:
        """The app's tasks across every shard (:meth:`tjobs.service.search.SearchService.tasks`):
        newest first, or by name with ``name_prefix``; each filter an index range, never a scan."""
        query = TaskQuery(app.id, status, None if kind is None else ScheduleKind(kind), name_prefix, key)
        return await self.search.tasks(query, limit=limit, cursor=cursor)

    # ---- flows: one, dead letters, redrive ---------------------------------------------------------

    def _flow_key(self, flow_id: str) -> tuple[int, int] | None:
        """The key of the flow ``flow_id`` names, where this node's topology can hold it (``None``: none)."""
        try:
            task_id, scheduled_at_ms = parse_flow_id(flow_id)
        except ValueError:
            return None
        return (task_id, scheduled_at_ms) if self._routable(task_id) else None

    async def get_flow(self, app: App, flow_id: str) -> Flow:
        key = self._flow_key(flow_id)
        flow = None if key is None else await self._store.get_flow(*key)
        if flow is None or flow.app_id != app.id:
            raise NotFound("flow", flow_id)
        return flow

    async def decide_run(self, flow_id: str, decide: Callable[[Flow | None, Task | None], RunWrite | None]) -> bool:
        """:meth:`RunRecords.decide_run` on the flow ``flow_id`` names (404 where it names none): a run's report."""
        key = self._flow_key(flow_id)
        if key is None:
            raise NotFound("flow", flow_id)
        return await self._store.decide_run(*key, decide)

    async def dead_letter_counts(self, app_ids: Sequence[str]) -> dict[str, int]:
        """Each app's dead letters now, from the store (one statement per logical database, read
        concurrently): what a page that says "now" shows, as :meth:`TaskCounts.of` does."""
        databases = range(self._topology.database_count)
        parts = await asyncio.gather(*(self._store.count_dead_letters(index, app_ids) for index in databases))
        return {app_id: sum(part.get(app_id, 0) for part in parts) for app_id in app_ids}

    async def redrive(self, app: App, flow_ids: Sequence[str]) -> list[Redriven]:
        """Put dead flows back to pending (attempts kept) and hand them to delivery at once.

        The re-driven delivery gets a fresh budget: ``max_attempts`` more attempts and ``max_age_s``
        from now. Per id: the flow as re-driven, or the error (not found, not dead).
        """
        if not 1 <= len(flow_ids) <= MAX_BATCH:
            raise InvalidInput("flow_ids", f"must hold 1..{MAX_BATCH} flow ids")
        results: list[Redriven] = []
        for flow_id in flow_ids:
            try:
                flow = await self.get_flow(app, flow_id)
                if flow.status is not FlowStatus.DEAD:
                    raise Conflict(f"flow {flow_id} is {flow.status.value}, not dead")
                now_ms = self._clock.now_ms()
                redriven = await self._store.redrive_flow(flow.task_id, flow.scheduled_at_ms, now_ms)
                if redriven is None:
                    raise Conflict(f"flow {flow_id} is no longer dead")
                self._observer.flow_redriven(app.id, flow.task_id, flow.scheduled_at_ms)
                task = await self._store.get_task(flow.task_id)
                if task is not None and self._flow_sink is not None:
                    policies: list[RetryPolicy] = []
                    if task.callback.targets and self._targets is not None:
                        policies = await self._targets.retry_policies(app, task.callback.targets)
                    self._flow_sink(self._fresh_budget(task, redriven, now_ms, policies), redriven)
                results.append((flow_id, redriven, None))
            except TjobsError as error:
                results.append((flow_id, None, error))
        return results

    def _fresh_budget(self, task: Task, flow: Flow, now_ms: int, policies: Sequence[RetryPolicy] = ()) -> Task:
        """``task`` with a budget of ``max_attempts`` more attempts and ``max_age_s`` from now (each as
        the flow's delivery reads it: the task's, else its targets' ``policies``, else the node's)."""
        callback = task.callback
        settings = self._settings.callbacks
        attempts = pick_budget(callback.max_attempts, policies, "max_attempts", settings.max_attempts)
        age_s = pick_budget(callback.max_age_s, policies, "max_age_s", settings.max_age_s)
        fresh = replace(
            callback,
            max_attempts=flow.attempts + attempts,
            max_age_s=max(0, (now_ms - flow.scheduled_at_ms) // 1000) + age_s,
        )
        return replace(task, callback=fresh)

    # ---- read ---------------------------------------------------------------------------------

    async def owner_of(self, task_id: int) -> str:
        """The id of the app that owns ``task_id`` (the admin acts as it). A deleted task's flows stay
        readable, and their app owns them; :class:`NotFound` when there is neither task nor flow."""
        task = await self._store.get_task(task_id)
        if task is not None:
            return task.app_id
        flows = await self._store.list_flows(task_id, 1)
        if not flows:
            raise NotFound("task", task_id)
        return flows[0].app_id

    async def get(self, app: App, task_id: int) -> Task:
        task = await self._store.get_task(task_id) if self._routable(task_id) else None
        if task is None or task.app_id != app.id:
            raise NotFound("task", task_id)
        return task

    async def health(self, tasks: Sequence[Task]) -> dict[int, TaskHealth]:
        """The health of a page of the app's tasks over the last 24 hours (:mod:`tjobs.service.task_health`)."""
        return await health_of_page(self._store, tasks, self._clock.now_ms())

    async def flows(
        self, app: App, task_id: int, limit: int, before_ms: int | None, after_ms: int | None = None
    ) -> list[Flow]:
        """A task's flows, newest first (an older page before ``before_ms``, a newer one after ``after_ms``:
        keyset ranges, never an offset); a deleted task's flows stay readable as history."""
        if not self._routable(task_id):
            raise NotFound("task", task_id)
        task = await self._store.get_task(task_id)
        if task is None:  # deleted: the app that owned it still reads its flows
            newest = await self._store.list_flows(task_id, 1)
            if not newest or newest[0].app_id != app.id:
                raise NotFound("task", task_id)
        elif task.app_id != app.id:
            raise NotFound("task", task_id)
        return await self._store.list_flows(task_id, limit, before_ms, after_ms)

    # ---- change -------------------------------------------------------------------------------

    async def update(self, app: App, task_id: int, request: Any) -> Task:
        """Apply the request's fields. With ``version`` (the task's revision as last read), answer
        409 if another edit landed since; fires never count. Without it, the last edit wins."""
        known_object(request, _UPDATE_KEYS)
        expected = request.get("version")
        if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
            raise InvalidInput("version", "must be an integer")
        task = await self.get(app, task_id)
        loaded = replace(task)  # the audit's before: the fields below change ``task``
        now_ms = self._clock.now_ms()
        limits = self._settings.limits
        fields: set[str] = set()
        if "name" in request:
            task.name = check_name(request["name"])
            fields.add("name")
        if "callback" in request:
            task.callback = parse_callback_request(with_defaults(request["callback"], app), limits)
            await self.check_targets(app, task.callback, request["callback"])
            fields.add("callback")
        if "payload" in request:
            check_payload(request["payload"], limits)
            task.payload = request["payload"]
            fields.add("payload")
        if "delivery" in request:
            task.delivery = parse_delivery(request["delivery"])
            fields.add("delivery")
        if "misfire_policy" in request:
            task.misfire_policy = parse_misfire_policy(request["misfire_policy"], task.misfire_policy)
            fields.add("misfire_policy")
        if "children" in request:
            task.children = parse_children(request["children"])
            await self.child_links.check_and_link(app, task.id, task.children)
            fields.add("children")
        if "schedule" in request:
            task.schedule = parse_schedule_request(
                request["schedule"], now_ms=now_ms, limits=limits, misfire_threshold_ms=self._threshold_ms
            )
            first = schedule_of(task.schedule, task.id, self.calendar_of(task.app_id, task.schedule)).first_fire(now_ms)
            if first is None:
                raise InvalidInput("schedule", "never fires", "never_fires")
            task.next_run_at_ms = first
            fields.add("schedule")
        if fields & {"schedule", "misfire_policy"}:
            check_fixed_delay_policy(task.schedule, task.misfire_policy)
        task.updated_at_ms = now_ms
        audit_scope.saw_before("task", task_id, loaded)
        return await self._edit(task, fields, task.status, expected_revision=expected)

    async def pause(self, app: App, task_id: int) -> Task:
        """Pause an active task (any other status is returned as it is); never a version conflict."""
        return await self._switch_status(app, task_id, TaskStatus.ACTIVE, TaskStatus.PAUSED)

    async def resume(self, app: App, task_id: int) -> Task:
        """Resume a paused task at its stored next run; if that passed while paused, the task's
        misfire policy decides what happens at its (immediate) fire."""
        return await self._switch_status(app, task_id, TaskStatus.PAUSED, TaskStatus.ACTIVE)

    async def _switch_status(self, app: App, task_id: int, before: TaskStatus, after: TaskStatus) -> Task:
        """The task moved from ``before`` to ``after`` (in any other status it is returned as it is),
        stored only if it is still ``before`` then."""
        task = await self.get(app, task_id)
        audit_scope.saw_before("task", task_id, task)
        if task.status is not before:
            return task
        task.status = after
        task.updated_at_ms = self._clock.now_ms()
        return await self._edit(task, {"status"}, before, from_status=before)

    async def trigger(self, app: App, task_id: int, request: Any = None) -> Flow:
        """A manual fire now, with its own flow; the schedule is untouched.

        ``request`` is the optional JSON body (:class:`tjobs.wire.TaskTrigger`): its ``payload``, if
        given, is this flow's payload instead of the task's, validated as a create's and stored with the
        flow (so every attempt, a retry after a restart included, sends it); the task is unchanged.
        """
        payload_json: str | None = None
        if request is not None:
            known_object(request, _TRIGGER_KEYS)
            if "payload" in request:
                check_payload(request["payload"], self._settings.limits)
                payload_json = orjson.dumps(request["payload"]).decode()
        task = await self.get(app, task_id)
        if payload_json is not None and not task.callback.sends_payload:
            raise InvalidInput(  # refused rather than dropped: such a callback never carries a payload
                "payload",
                "this task's callback sends no payload (it has its own callback.body, or is a GET)",
                "unsupported_field",
            )
        audit_scope.saw_before("task", task_id, task)
        now_ms = self._clock.now_ms()
        flow = Flow(task.id, now_ms, task.app_id, FlowKind.MANUAL, FlowStatus.PENDING, 0, now_ms, now_ms, now_ms)
        flow.payload_json = payload_json
        stored = await self._store.insert_manual_flow(task.id, flow)
        if self._flow_sink is not None:
            self._flow_sink(task, stored)
        return stored

    async def backfill_flow(
        self, app: App, task: Task, scheduled_at_ms: int, payload_json: str | None = None
    ) -> Flow | None:
        """A manual flow of ``task`` for its past instant ``scheduled_at_ms`` (a backfill's:
        :mod:`tjobs.service.backfill`; a child's, at its parent's instant: :mod:`tjobs.service.child_flows`),
        with its own ``payload_json`` if given, handed to delivery with a budget counted from now (as a
        redrive's: its first attempt comes long after its instant); ``None`` when that instant has a
        flow already (the flow's key is the task and the instant: never a second one)."""
        now_ms = self._clock.now_ms()
        flow = Flow(task.id, scheduled_at_ms, app.id, FlowKind.MANUAL, FlowStatus.PENDING, 0, now_ms, now_ms, now_ms)
        flow.payload_json = payload_json
        try:
            stored = await self._store.insert_manual_flow(task.id, flow)
        except Conflict:
            return None
        if self._flow_sink is not None:
            policies: list[RetryPolicy] = []
            if task.callback.targets and self._targets is not None:
                policies = await self._targets.retry_policies(app, task.callback.targets)
            self._flow_sink(self._fresh_budget(task, stored, now_ms, policies), stored)
        return stored

    async def delete(self, app: App, task_id: int) -> None:
        """Delete the task and cancel its pending flows in one transaction, so no node sends them
        again (a retry already waiting on a node reads the flow's status first); every flow stays
        readable as history."""
        task = await self.get(app, task_id)
        audit_scope.saw_before("task", task_id, task)
        begun = self.counts.epoch()
        if await self._store.delete_task_cancelling_flows(task_id, self._clock.now_ms()):
            self.counts.changed(app.id, task.status, None, begun)
        await self.child_links.unlink(task_id)
        await self._hot_tier.publish(TaskChange.deleted(task_id, app.id))

    async def _edit(
        self,
        task: Task,
        fields: set[str],
        before: TaskStatus,
        *,
        expected_revision: int | None = None,
        from_status: TaskStatus | None = None,
    ) -> Task:
        """Store an edit of ``task`` (read in status ``before``) and hand it to the hot tier."""
        begun = self.counts.epoch()
        stored = await self._store.edit_task(task, fields, expected_revision=expected_revision, from_status=from_status)
        if stored.status is not before:
            self.counts.changed(stored.app_id, before, stored.status, begun)
        await self._hot_tier.publish(TaskChange.of(stored))
        return stored

    def _routable(self, task_id: int) -> bool:
        return task_id > 0 and shard_of_task_id(task_id) < self._topology.shard_count


def with_defaults(callback: Any, app: App) -> Any:
    """The app's callback defaults (``settings.callback_defaults``) under the request's own fields.
    A callback naming targets takes none: each target carries its own settings and retry policy."""
    defaults = app.settings.get("callback_defaults")
    if not defaults or not isinstance(callback, dict) or "target" in callback or "targets" in callback:
        return callback
    merged = {k: v for k, v in defaults.items() if k != "headers"}
    merged.update(callback)
    if defaults.get("headers") and isinstance(callback.get("headers", {}), dict):
        merged["headers"] = {**defaults["headers"], **callback.get("headers", {})}
    return merged


def reminted(task: Task, task_id: int, now_ms: int, calendar: CalendarRules | None) -> None:
    """Give a task built for insertion another id: a jittered schedule's first instant is seeded by
    the id (:mod:`tjobs.schedules.jitter`), so it is computed again."""
    task.id = task_id
    task.next_run_at_ms = schedule_of(task.schedule, task_id, calendar).first_fire(now_ms)
