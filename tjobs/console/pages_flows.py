"""Flows: the search across shards (by task name, with time presets, a total and a CSV export), the dead
letters (newest first, filtered) and their redrive: the chosen ones, or every one that matches as one
server-side job (:mod:`tjobs.console.pages_operator_jobs` shows its progress). One flow's page is
:mod:`tjobs.console.pages_flow_detail`.

Every redrive is confirmed first. Chosen ones: the post without ``confirmed`` answers a page naming them,
whose form posts them again confirmed. All matching: the confirmation page gives the count the server
made (of the dead letters dead at that moment) and mints the job's id; posting it starts the job under
that id, so a form posted twice starts one job, and a count that changed meanwhile is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.api.render import flow_json
from tjobs.api.routes_flows import export_response
from tjobs.console.context import ConsoleRoute, Principal, console_of
from tjobs.errors import InvalidInput
from tjobs.model import App, Flow
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.flow_export import MAX_EXPORT_ROWS
from tjobs.service.flow_filters import FLOW_STATUS_FILTERS, WINDOWS_MS, FlowFilters, parse_flow_filters
from tjobs.service.operator_jobs import MAX_REDRIVE_JOB, dead_letter_filters, is_job_id, new_job_id
from tjobs.service.tasks import MAX_BATCH

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50
COUNT_AT_MOST = 10_000  # the search page's total: past it, "more than"
CUSTOM_RANGE = "custom"
TEXT = Annotated[str | None, Query(max_length=200)]
INSTANT = Annotated[str | None, Query(max_length=40)]
FILTER_FORM = ("task_id", "task_name_prefix", "target", "last_answer", "window", "from", "to")


async def filter_values(
    status: Annotated[str | None, Query(max_length=20)] = None,
    task_id: Annotated[str | None, Query(max_length=40)] = None,
    task_name_prefix: TEXT = None,
    target: TEXT = None,
    last_answer: Annotated[str | None, Query(max_length=10)] = None,
    window: Annotated[str | None, Query(max_length=10)] = None,
    start: Annotated[INSTANT, Query(alias="from")] = None,
    to: INSTANT = None,
) -> dict[str, str | None]:
    """The search form's fields as the query gives them (judged by :func:`_form_filters`)."""
    values = {"status": status, "task_id": task_id, "task_name_prefix": task_name_prefix, "target": target}
    return values | {"last_answer": last_answer, "window": window, "from": start, "to": to}


FilterValues = Annotated[dict[str, str | None], Depends(filter_values)]


def _form_filters(values: Mapping[str, str | None], now_ms: int) -> tuple[dict[str, str], FlowFilters]:
    """The search form's fields as shown again, and the filters they give. A time preset leaves the
    custom range out (the form keeps both fields; only "custom range" reads them)."""
    shown = {name: (values.get(name) or "") for name in ("status", *FILTER_FORM)}
    shown["task_name_prefix"] = values.get("task_name_prefix") or ""  # kept as typed
    given: dict[str, str | None] = dict(shown)
    if shown["window"] in ("", CUSTOM_RANGE):
        given["window"] = None
    else:
        given["from"] = given["to"] = None
    return shown, parse_flow_filters(given, now_ms)


def _query(shown: Mapping[str, str], scoped: App, principal: Principal, **more: str) -> str:
    """The page's query for a link (the filters given, the admin's app)."""
    query = {name: value for name, value in shown.items() if value}
    if principal.admin:
        query["app"] = scoped.id
    return urlencode({**query, **more})


@dataclass(frozen=True)
class NamedSearch:
    """What an action on a search's flows works on: the session, the app it is about, and the search
    form's filters (``shown`` as typed) as of ``now_ms``."""

    principal: Principal
    app: App
    shown: dict[str, str]
    filters: FlowFilters
    now_ms: int


def _named_search(refused: str) -> Callable[..., Awaitable[NamedSearch]]:
    """A dependency: the request's :class:`NamedSearch`, whose app the admin must name (422 ``refused``
    otherwise)."""

    async def named_search(request: Request, values: FilterValues, app: TEXT = None) -> NamedSearch:
        console = console_of(request)
        principal = await console.principal(request)
        scoped = await console.scope(principal, app)
        if scoped is None:
            raise InvalidInput("app", refused)
        now_ms = console.node.clock.now_ms()
        shown, filters = _form_filters(values, now_ms)
        return NamedSearch(principal, scoped, shown, filters, now_ms)

    return named_search


SearchToExport = Annotated[NamedSearch, Depends(_named_search("name the app whose flows to export"))]
SearchToRedrive = Annotated[NamedSearch, Depends(_named_search("name the app whose dead letters to redrive"))]


def _resolved(filters: FlowFilters) -> dict[str, str]:
    """The filters as the confirmation form posts them: a time preset as the range it stood for when the
    count was made (posted later, "the last hour" would be another hour)."""
    fields = {"task_id": filters.task_id, "task_name_prefix": filters.task_name_prefix, "target": filters.target}
    fields |= {"last_answer": filters.last_answer, "from": filters.from_ms, "to": filters.until_ms}
    return {name: str(value) for name, value in fields.items() if value is not None}


async def _rows(request: Request, flows: list[Flow]) -> list[dict[str, Any]]:
    """The flows as the templates show them, each with its task's name (``None``: deleted)."""
    names = await console_of(request).node.tasks.search.task_names({flow.task_id for flow in flows})
    return [{**flow_json(flow), "task_name": names.get(flow.task_id)} for flow in flows]


@router.get("/console/flows")
async def flows_page(
    request: Request,
    values: FilterValues,
    app: TEXT = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    id: Annotated[str | None, Query(max_length=60)] = None,
) -> Response:
    """The cross-shard flow search (``GET /v1/flows``), newest first, with its total; ``id`` opens one flow."""
    console = console_of(request)
    principal = await console.principal(request)
    if id:
        return RedirectResponse(f"/console/flows/{quote(id.strip(), safe='')}", status_code=303)
    scoped = await console.scope(principal, app)
    found = await _search(request, principal, scoped, values, cursor, dead=False)
    return await console.render_listing(
        request,
        "flows.html",
        principal,
        scoped,
        422 if found["error"] else 200,
        statuses=FLOW_STATUS_FILTERS,
        windows=tuple(WINDOWS_MS),
        export_rows=MAX_EXPORT_ROWS,
        **found,
    )


async def _search(
    request: Request,
    principal: Principal,
    scoped: App | None,
    values: Mapping[str, str | None],
    cursor: str | None,
    *,
    dead: bool,
) -> dict[str, Any]:
    """A page of the search (``dead``: of the dead letters) with its total, as the templates show it:
    ``filters`` as typed, ``flows``, ``total``, ``query`` (the filters, for the export or the redrive of
    all) and ``next_query``; or ``error``, a bad filter's message."""
    node = console_of(request).node
    found: dict[str, Any] = {
        "filters": {name: value or "" for name, value in values.items()},
        "flows": [],
        "total": None,
    }
    found |= {"query": None, "next_query": None, "error": None}
    if scoped is None:
        return found
    try:
        shown, filters = _form_filters(values, node.clock.now_ms())
        if dead:
            filters = dead_letter_filters(filters)
        search = node.tasks.search
        page = await search.flows(scoped.id, filters, limit=PAGE_SIZE, cursor=cursor or None)
        found |= {
            "filters": shown,
            "flows": await _rows(request, page.items),
            "query": _query(shown, scoped, principal),
        }
        found["total"] = await search.count_flows(scoped.id, filters, MAX_REDRIVE_JOB if dead else COUNT_AT_MOST)
        if page.next_cursor is not None:
            found["next_query"] = _query(shown, scoped, principal, cursor=page.next_cursor)
    except InvalidInput as invalid:
        found["error"] = invalid.message
    return found


@router.get("/console/flows/export.csv")
async def flows_export(request: Request, search: SearchToExport) -> Response:
    """The search's flows as CSV (``GET /v1/flows:export``): newest first, at most 100,000 rows."""
    node = console_of(request).node
    return await export_response(node.tasks.search, search.app.id, search.filters, node.clock.now_ms())


@router.get("/console/dead-letters")
async def dead_letters(
    request: Request,
    values: FilterValues,
    app: TEXT = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Response:
    """The app's dead letters newest first across shards, filtered, with their count and recent jobs."""
    console = console_of(request)
    principal = await console.principal(request)
    scoped = await console.scope(principal, app)
    found = await _search(request, principal, scoped, values, cursor, dead=True)
    jobs = [] if scoped is None else await console.node.operator_jobs.list_jobs(scoped.id, 5)
    return await console.render_listing(
        request,
        "dead_letters.html",
        principal,
        scoped,
        422 if found["error"] else 200,
        windows=tuple(WINDOWS_MS),
        jobs=jobs,
        **found,
    )


@router.get("/console/dead-letters/redrive-all")
async def redrive_all_confirm(request: Request, search: SearchToRedrive) -> Response:
    """How many dead letters match now, to confirm: the form starts one job of exactly those."""
    console = console_of(request)
    count = await console.node.operator_jobs.count_dead_letters(search.app, search.filters, search.now_ms)
    return console.render(
        request,
        "redrive_job_confirm.html",
        search.principal,
        scoped=search.app,
        posted=_resolved(search.filters),
        count=count,
        dead_before_ms=search.now_ms,
        job_id=new_job_id(),
        back_query=_query(search.shown, search.app, search.principal),
    )


@router.post("/console/dead-letters/redrive-jobs/{job_id}")
async def redrive_all_start(request: Request, job_id: str) -> Response:
    """Start the confirmed job (its id minted by the confirmation page) and show its progress."""
    console = console_of(request)
    principal, form = await console.posted(request)
    if not is_job_id(job_id):
        raise InvalidInput("job_id", "not a job id this console gave")
    scoped = await console.scope(principal, form.get("app") or None)
    if scoped is None:
        raise InvalidInput("app", "name the app whose dead letters to redrive")
    node = console.node
    _, filters = _form_filters({name: form.get(name) for name in FILTER_FORM}, node.clock.now_ms())
    confirmed = form.get("confirm_count")
    dead_before = form.get("dead_before_ms")
    if not confirmed.isdigit():
        raise InvalidInput("confirm_count", "confirm the count of dead letters to redrive")
    if not dead_before.isdigit() or len(dead_before) > 15:
        raise InvalidInput("dead_before_ms", "not an instant this console gave")
    await node.operator_jobs.start_redrive(
        scoped,
        filters,
        confirm_count=int(confirmed),
        dead_before_ms=int(dead_before),
        created_by=principal.user or principal.name,
        job_id=job_id,
    )
    return RedirectResponse(f"/console/operator-jobs/{job_id}", status_code=303)


@router.post("/console/dead-letters/redrive")
async def redrive(request: Request) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    scoped = await console.scope(principal, form.get("app") or None)
    if scoped is None:
        raise InvalidInput("app", "name the app whose dead letters to redrive")
    flow_ids = [flow_id for flow_id in form.getlist("flow_ids") if flow_id]
    if not 1 <= len(flow_ids) <= MAX_BATCH:
        raise InvalidInput("flow_ids", f"choose 1..{MAX_BATCH} dead letters to redrive")
    if form.get("confirmed") != "yes":
        return console.render(request, "redrive_confirm.html", principal, scoped=scoped, flow_ids=flow_ids)
    results = await console.node.tasks.redrive(scoped, flow_ids)
    outcomes = [
        {"flow_id": flow_id, "ok": error is None, "message": "back to pending" if error is None else error.message}
        for flow_id, _, error in results
    ]
    return console.render(request, "redrive_done.html", principal, scoped=scoped, outcomes=outcomes)
