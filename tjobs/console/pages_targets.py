"""Named delivery targets: the app's list, one target's page, and deleting one (confirmed).

**Credentials are never on a page.** Every view here is built from the API's answer
(:func:`tjobs.targets.codec.target_json`, values already ``***``), and shows each credential key as
"set" or "not set" only; the templates never receive a :class:`~tjobs.targets.model.Target`.

A target's name is unique within its app, so the admin names the app (``?app=``) on these pages as on
the task list; an app session's other app id is a 404 (:meth:`Console.scope`).

The target page counts the tasks that name it (those that can still fire, as a delete checks:
:meth:`tjobs.stores.base.TaskStore.count_target_references`, one indexed read per logical
database). The list does not: that would be one such read per target listed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from tjobs import wire
from tjobs.clock import iso_ms
from tjobs.console.context import ConsoleRoute, Principal, console_of
from tjobs.errors import NotFound, TargetInUse
from tjobs.model import App
from tjobs.service.cursors import MAX_CURSOR_CHARS
from tjobs.service.target_requests import CREDENTIAL_KEYS
from tjobs.settings import CallbackSettings
from tjobs.targets.codec import target_json
from tjobs.targets.model import Protocol, Target

router = APIRouter(route_class=ConsoleRoute)

PAGE_SIZE = 50
PROTOCOL_LABELS = {
    Protocol.HTTP: "HTTP",
    Protocol.GRPC: "gRPC",
    Protocol.AMQP: "AMQP",
    Protocol.NATS: "NATS JetStream",
    Protocol.REDIS_STREAM: "Redis Streams",
}
RETRY_FIELDS = ("max_attempts", "max_age_s", "backoff_base_ms", "backoff_max_ms")
TARGET_NOTICES = {"deleted": "Target deleted."}
_NAME = re.compile(wire.TARGET_NAME_PATTERN)


# ---- what a page shows of a target (pure: from the API's redacted answer) --------------------------


def destination(protocol: Protocol, settings: dict[str, Any]) -> str:
    """Where the target sends, in one line: the URL(s) and method, the address, the exchange and
    routing key, the subject, or the stream key."""
    if protocol is Protocol.HTTP:
        return f"{settings['method']} {', '.join(settings['urls'])}"
    if protocol is Protocol.GRPC:
        return str(settings["address"]) + (" (TLS)" if settings.get("tls") else "")
    if protocol is Protocol.AMQP:
        exchange = settings["exchange"] or "(default exchange)"
        return f"exchange {exchange}, routing key {settings['routing_key'] or '(empty)'}"
    if protocol is Protocol.NATS:
        stream = settings.get("stream")
        return f"subject {settings['subject']}" + (f" (stream {stream})" if stream else "")
    return f"stream {settings['stream']}"


def retry_rows(retry: dict[str, int], defaults: CallbackSettings) -> list[dict[str, Any]]:
    """Each retry field: the target's own value, or the node's default it falls back to."""
    return [
        {"field": name, "value": retry.get(name, getattr(defaults, name)), "own": name in retry}
        for name in RETRY_FIELDS
    ]


def retry_summary(retry: dict[str, int]) -> str:
    if not retry:
        return "node defaults"
    return ", ".join(f"{name} {value}" for name, value in retry.items())


def credential_rows(protocol: Protocol, redacted: dict[str, str]) -> list[dict[str, Any]]:
    """Every credential key the protocol reads, and any other key stored (an HTTP target's header
    names), each with whether it is set: never its value."""
    known = CREDENTIAL_KEYS[protocol] or frozenset()
    return [{"key": key, "set": key in redacted} for key in sorted(known | set(redacted))]


def target_view(target: Target, defaults: CallbackSettings) -> dict[str, Any]:
    """What the console may show of ``target``: everything the API answers, credentials as set or
    not set (their values never reach a template)."""
    shown = target_json(target, iso_ms)
    protocol = target.protocol
    return {
        "name": shown["name"],
        "protocol": shown["protocol"],
        "protocol_label": PROTOCOL_LABELS[protocol],
        "version": shown["version"],
        "destination": destination(protocol, shown["settings"]),
        "settings": shown["settings"],
        "retry": retry_rows(shown["retry"], defaults),
        "retry_summary": retry_summary(shown["retry"]),
        "credentials": credential_rows(protocol, shown["credentials"]),
        "created_at_ms": target.created_at_ms,
        "updated_at_ms": target.updated_at_ms,
    }


# ---- routes -----------------------------------------------------------------------------------------


def _name_of(raw: str) -> str:
    """A target name from a path; anything that cannot be one is a 404 (as a name not stored)."""
    if not _NAME.fullmatch(raw):
        raise NotFound("target", raw[:80])
    return raw


async def _owner(request: Request, principal: Principal, app_id: str | None, name: str) -> App:
    """The app whose target ``name`` a page is about: an app session's own; the admin names it."""
    scoped = await console_of(request).scope(principal, app_id)
    if scoped is None:  # the admin named no app: no target of that name to show
        raise NotFound("target", name)
    return scoped


@router.get("/console/targets")
async def target_list(
    request: Request,
    app: Annotated[str | None, Query(max_length=200)] = None,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    console = console_of(request)
    principal, scoped = await console.listing_scope(request, app)
    targets: list[dict[str, Any]] = []
    next_cursor = None
    if scoped is not None:
        items, next_cursor = await console.node.target_service.list_targets(scoped, PAGE_SIZE, cursor or None)
        defaults = console.node.settings.callbacks
        targets = [target_view(target, defaults) for target in items]
    notice = TARGET_NOTICES.get(done or "")
    return await console.render_listing(
        request, "targets.html", principal, scoped, targets=targets, next_cursor=next_cursor, notice=notice
    )


async def _target_context(request: Request, principal: Principal, app_id: str | None, raw_name: str) -> dict[str, Any]:
    console = console_of(request)
    name = _name_of(raw_name)
    owner = await _owner(request, principal, app_id, name)
    target = await console.node.target_service.get(owner, name)
    naming = await console.node.target_service.references(owner, name)
    return {"owner": owner, "target": target_view(target, console.node.settings.callbacks), "naming": naming}


async def _target_page(request: Request, raw_name: str, app_id: str | None, template: str, **extra: Any) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    context = await _target_context(request, principal, app_id, raw_name)
    return console.render(request, template, principal, **context, **extra)


@router.get("/console/targets/{name}")
async def target_page(
    request: Request,
    name: str,
    app: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    return await _target_page(request, name, app, "target.html")


@router.get("/console/targets/{name}/confirm")
async def confirm_delete(
    request: Request,
    name: str,
    app: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    return await _target_page(request, name, app, "target_confirm.html", error=None)


@router.post("/console/targets/{name}/delete")
async def delete(request: Request, name: str) -> Response:
    console = console_of(request)
    principal, form = await console.posted(request)
    app_id = form.get("app") or None
    target_name = _name_of(name)
    owner = await _owner(request, principal, app_id, target_name)
    try:
        await console.node.target_service.delete(owner, target_name)
    except TargetInUse as in_use:
        context = await _target_context(request, principal, app_id, target_name)
        tasks = in_use.details["tasks"]
        error = (
            f"Not deleted: {tasks} task{'s' if tasks != 1 else ''} that can still fire "
            f"name{'s' if tasks == 1 else ''} this target. Change or delete them first."
        )
        return console.render(request, "target_confirm.html", principal, 409, **context, error=error)
    app_part = f"&app={quote(owner.id, safe='')}" if principal.admin else ""
    return RedirectResponse(f"/console/targets?done=deleted{app_part}", status_code=303)
