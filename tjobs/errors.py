"""The one error root of tjobs and its specific kinds.

::

    TjobsError
    ├── InvalidInput          422  a request field is wrong; ``field`` names it
    │   ├── BodyTooLarge      413  the body passed its byte cap while being read
    │   ├── FieldTooLarge     413  one field of the body passed its own cap (a run's ``result``)
    │   ├── UnsupportedMediaType 415  a body that is not JSON (``content-type``)
    │   └── ConfirmationRequired 400  a destructive call without its confirmation parameter
    ├── NotFound              404  the id does not exist (or belongs to another app)
    ├── Conflict              409
    │   ├── VersionConflict        optimistic ``version`` lost a race
    │   ├── DuplicateKey           ``(app, key)`` already names a task
    │   ├── TaskIdTaken            a freshly minted task id collided (1 in 4096 per ms and shard)
    │   ├── TargetExists           the app already has a target of this name
    │   ├── TargetVersionConflict  a target's ``version`` lost a race
    │   ├── TargetInUse            tasks still name the target (``details.tasks`` says how many)
    │   └── RunConflict            a run report, log or cancel that the flow's run cannot take (it ended,
    │                              another attempt runs, or none runs); ``details`` says where the run is
    ├── Unauthorized          401
    ├── AppDisabled           403  the app's key is refused while an operator has it disabled
    ├── Forbidden             403  an operator account's role does not allow this
    ├── QuotaExceeded         429
    │   └── RateLimited            a request rate limit; ``retry_after_s`` says when to come back
    ├── StorageUnavailable    503  a database could not be reached; nothing was written; ``Retry-After``
    │   ├── StorageOutcomeUnknown  a create's write was sent, then its server went silent: it may have
    │   │                          committed (``details.task_id`` names the task it would be)
    │   └── StaleShardMap          a moved (or moving) logical database refused the write; ``Retry-After``
    ├── Fenced                503  this node lost the right to fire mid-transaction; rolled back
    └── AuditUnavailable      503  a change was made but its audit entry could not be written

The API maps these to status codes in one handler; nothing else catches them to hide them.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any


class TjobsError(Exception):
    """Root of every error tjobs raises on purpose."""

    status_code = 500
    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(TjobsError):
    """A request field is invalid; ``field`` is a dotted path such as ``schedule.expr``."""

    status_code = 422
    code = "invalid_input"

    def __init__(self, field: str, message: str, code: str = "invalid_input") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.code = code


def known_object(body: Any, fields: Set[str]) -> dict[str, Any]:
    """``body`` if it is a JSON object of ``fields`` only; otherwise :class:`InvalidInput` naming ``body``
    (not an object) or its first unknown field in sorted order (``unknown_field``)."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    unknown = set(body) - fields
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "unknown field", "unknown_field")
    return body


class BodyTooLarge(InvalidInput):
    """The request body passed ``limit_bytes`` (the setting named ``setting``) while being read."""

    status_code = 413

    def __init__(self, limit_bytes: int, setting: str) -> None:
        super().__init__("body", f"larger than {limit_bytes} bytes ({setting})", "too_large")
        self.limit_bytes = limit_bytes


class FieldTooLarge(InvalidInput):
    """A body field passed its own cap (``limit_bytes``, the setting named ``setting``)."""

    status_code = 413

    def __init__(self, field: str, limit_bytes: int, setting: str) -> None:
        super().__init__(field, f"larger than {limit_bytes} bytes as JSON ({setting})", "too_large")
        self.limit_bytes = limit_bytes


class UnsupportedMediaType(InvalidInput):
    """A request body sent as something other than JSON."""

    status_code = 415

    def __init__(self, media_type: str) -> None:
        super().__init__("content-type", f"{media_type or 'none'} is not application/json", "unsupported_media_type")


class ConfirmationRequired(InvalidInput):
    """A destructive call (deleting an app) must repeat what it destroys in ``field``."""

    status_code = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, "confirmation_required")


class NotFound(TjobsError):
    status_code = 404
    code = "not_found"

    def __init__(self, kind: str, ident: object) -> None:
        super().__init__(f"{kind} {ident} not found")
        self.kind = kind
        self.ident = ident


class Conflict(TjobsError):
    status_code = 409
    code = "conflict"


class VersionConflict(Conflict):
    code = "version_conflict"

    def __init__(self, task_id: int, expected: int, actual: int | None) -> None:
        super().__init__(f"task {task_id} is at version {actual}, not {expected}")
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class RunConflict(Conflict):
    """What was asked of a flow's run cannot be done: ``code`` says why (``run_finished``: the run ended;
    ``stale_attempt``: the report names another attempt than the one running; ``not_running``: no
    run is live), ``details`` where the flow and its run are."""

    def __init__(self, code: str, message: str, details: dict[str, object]) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class DuplicateKey(Conflict):
    code = "duplicate_key"

    def __init__(self, app_id: str, key: str, existing_task_id: int) -> None:
        super().__init__(f"app {app_id} already has task {existing_task_id} with key {key!r}")
        self.app_id = app_id
        self.key = key
        self.existing_task_id = existing_task_id


class TaskIdTaken(Conflict):
    """The id minted for a new task is already stored; minting another one settles it."""

    def __init__(self, task_id: int) -> None:
        super().__init__(f"task id {task_id} already exists")
        self.task_id = task_id


class TargetExists(Conflict):
    code = "target_exists"

    def __init__(self, app_id: str, name: str) -> None:
        super().__init__(f"app {app_id} already has a target named {name!r}")


class TargetVersionConflict(Conflict):
    code = "version_conflict"

    def __init__(self, name: str, expected: int, actual: int) -> None:
        super().__init__(f"target {name!r} is at version {actual}, not {expected}")
        self.expected = expected
        self.actual = actual


class TargetInUse(Conflict):
    """Deleting a target that tasks still name; the API answers ``details: {"tasks": count}``."""

    code = "target_in_use"

    def __init__(self, name: str, tasks: int) -> None:
        super().__init__(f"target {name!r} is named by {tasks} task(s); change or delete them first")
        self.details = {"tasks": tasks}


class Unauthorized(TjobsError):
    status_code = 401
    code = "unauthorized"


class Forbidden(TjobsError):
    """The caller is known, but its role (viewer, operator, admin of an app; or global admin) does not allow
    this request."""

    status_code = 403
    code = "forbidden"


class AppDisabled(TjobsError):
    """The calling app is disabled (``POST /v1/apps/{id}/disable``): its key is refused with 403."""

    status_code = 403
    code = "app_disabled"

    def __init__(self, app_id: str) -> None:
        super().__init__(
            f"app {app_id} is disabled by an operator: its key is refused and its tasks do not fire "
            "until it is enabled again"
        )
        self.app_id = app_id


class QuotaExceeded(TjobsError):
    status_code = 429
    code = "quota_exceeded"


class RateLimited(QuotaExceeded):
    """A rate limit refused the request; the API answers ``Retry-After: retry_after_s``."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StorageUnavailable(TjobsError):
    """A database server could not be reached (or did not answer in time) and nothing was written: the
    same request may simply be sent again. The API answers 503 with ``Retry-After: retry_after_s``."""

    status_code = 503
    code = "storage_unavailable"
    retry_after_s = 1


class StorageOutcomeUnknown(StorageUnavailable):
    """A create's write reached its server, which then failed or went silent before confirming it: the
    task may have been stored (a frozen server commits it when it resumes) or not. ``details`` names the
    id it has if it was (``GET /v1/tasks/{id}`` tells once the server answers); a retry with the same
    ``key`` is idempotent, a retry without one may store a second task."""

    code = "storage_outcome_unknown"

    def __init__(self, task_id: int, why: str) -> None:
        super().__init__(
            f"task {task_id} may or may not have been stored: {why}; GET /v1/tasks/{task_id} once the "
            "database answers, or retry with the same key (a retry without a key may store it twice)"
        )
        self.task_id = task_id
        self.details = {"stored": "unknown", "task_id": str(task_id)}


class StaleShardMap(StorageUnavailable):
    """A logical database refused a write made under an older shard-map epoch than its copy admits
    (it moved, or is moving): nothing was written; the node reloads the map and the write is retried
    (an API caller gets 503 with ``Retry-After``)."""

    code = "shard_moving"
    retry_after_s = 1


class Fenced(TjobsError):
    """The node's fence closed (lease, database or clock) while a fire transaction was open: the
    transaction was rolled back instead of committed, and whoever owns the shard now fires it."""

    status_code = 503
    code = "fenced"


class AuditUnavailable(TjobsError):
    """A change was made but its audit-log entry could not be written (docs/operations.md, "Audit log"):
    the API answers 503 naming the audit (``field`` ``audit``), so the caller knows the change is not on
    record; read the object to see its state before repeating it."""

    status_code = 503
    code = "audit_unavailable"
    retry_after_s = 1

    def __init__(self, action: str, why: str) -> None:
        super().__init__(f"audit: the change ({action}) was applied but its audit entry was not written: {why}")
        self.field = "audit"
