"""``GET /v1/audit``: the audit log, newest first, filtered and paged by id (keyset).

The admin key reads every entry (``app`` narrows to one app; ``app=`` empty: the entries of no app);
an app key reads its own app's entries only (another app's id finds nothing, as a filter never 404s).
Entries are written by :class:`tjobs.api.audit_trail.AuditMiddleware`; nothing updates or deletes one
but the retention pass (``audit.retention_days``).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from tjobs import wire
from tjobs.api.deps import AppOrAdminDep, NodeDep, errors, json_response, ok
from tjobs.clock import datetime_to_ms, iso_ms
from tjobs.errors import InvalidInput
from tjobs.model import MAX_ID
from tjobs.service.audit import AuditEntry, AuditQuery

router = APIRouter(prefix="/v1", tags=["audit"])

MAX_LIMIT = 500
INSTANT_FORM = r"^[0-9A-Za-z:.+ -]{0,40}$"  # the characters of epoch ms and RFC 3339; the parse judges the rest
ACTION_PREFIX = re.compile(r"^[a-z0-9_.]{1,64}$")
_APP_ID = re.compile(wire.APP_ID_PATTERN)


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": str(entry.id),
        "at": iso_ms(entry.at_ms),
        "actor": {"kind": entry.actor_kind, "name": entry.actor_name},
        "app_id": entry.app_id,
        "action": entry.action,
        "object_id": entry.object_id,
        "before": entry.before,
        "after": entry.after,
        "source": entry.source,
        "via": entry.via,
        "request_id": entry.request_id or None,
    }


def parse_instant(raw: str | None, field: str) -> int | None:
    """An instant filter: RFC 3339 with its offset, or epoch milliseconds; 422 naming ``field``."""
    if raw is None or raw == "":
        return None
    text = raw.strip()
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            field, "must be an RFC 3339 instant with its offset, or epoch milliseconds", "invalid_instant"
        ) from None
    if instant.tzinfo is None:
        raise InvalidInput(field, "must carry its UTC offset (e.g. 2026-12-01T00:00:00Z)", "invalid_instant")
    return datetime_to_ms(instant)


def audit_query(
    *,
    caller_app: str | None,
    app: str | None,
    actor: str | None,
    action: str | None,
    since: str | None,
    until: str | None,
    object_id: str | None,
    cursor: str | None,
    limit: int,
) -> AuditQuery | None:
    """The store query for these filters (``None``: nothing can match, another app's entries); 422
    naming the field for a bad one. Shared by the API and the console."""
    if app is not None and app != "" and not _APP_ID.match(app):
        raise InvalidInput("app", "must be an app id")
    if action is not None and action != "" and not ACTION_PREFIX.match(action):
        raise InvalidInput("action", "must be an action or its prefix: lowercase letters, digits, '_' and '.'")
    if actor is not None and len(actor) > 128:
        raise InvalidInput("actor", "at most 128 characters")
    if object_id is not None and len(object_id) > 200:
        raise InvalidInput("object", "at most 200 characters")
    before_id = None
    if cursor:
        if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19 or int(cursor) > MAX_ID:
            raise InvalidInput("cursor", "must be the next_cursor of a previous page", "bad_cursor")
        before_id = int(cursor)
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput("limit", f"must be 1..{MAX_LIMIT}")
    since_ms, until_ms = parse_instant(since, "since"), parse_instant(until, "until")
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise InvalidInput("until", "must be after since", "out_of_range")
    if caller_app is not None:
        if app and app != caller_app:
            return None
        app = caller_app
    return AuditQuery(
        app_id=app,
        actor=actor or None,
        action_prefix=action or None,
        since_ms=since_ms,
        until_ms=until_ms,
        object_id=object_id or None,
        before_id=before_id,
        limit=limit,
    )


@router.get(
    "/audit",
    summary="Search the audit log, newest first (admin: every app; an app key: its own)",
    responses={**ok(200, None), **errors(401, 422)},
)
async def search_audit(
    caller: AppOrAdminDep,
    node: NodeDep,
    app: Annotated[
        str | None,
        Query(description="an app id; empty: entries of no app (admin)", pattern=f"^$|{wire.APP_ID_PATTERN}"),
    ] = None,
    actor: Annotated[str | None, Query(description="who: an app id, 'admin' or a user name", max_length=128)] = None,
    action: Annotated[
        str | None, Query(description="an action or its prefix: task.pause, task.", pattern=r"^[a-z0-9_.]{0,64}$")
    ] = None,
    since: Annotated[str | None, Query(description="at or after (RFC 3339 or epoch ms)", pattern=INSTANT_FORM)] = None,
    until: Annotated[str | None, Query(description="before (RFC 3339 or epoch ms)", pattern=INSTANT_FORM)] = None,
    object: Annotated[
        str | None, Query(description="the object's id (task id, app id, target name...)", max_length=200)
    ] = None,
    cursor: Annotated[
        str | None, Query(description="next_cursor of the previous page", pattern=r"^[0-9]{0,19}$")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
) -> Any:
    query = audit_query(
        caller_app=None if caller is None else caller.id,
        app=app,
        actor=actor,
        action=action,
        since=since,
        until=until,
        object_id=object,
        cursor=cursor,
        limit=limit,
    )
    entries = [] if query is None else await node.audit.search(query)
    next_cursor = str(entries[-1].id) if query is not None and len(entries) == query.limit else None
    return json_response({"items": [entry_json(entry) for entry in entries], "next_cursor": next_cursor})
