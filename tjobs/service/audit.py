"""The audit log's service: what an entry holds (redacted, capped), recording it, searching, and the
retention pass.

- **Redaction.** Secrets and credentials are never stored: every value under a key that names one
  anywhere in a nested document becomes ``"[redacted]"`` (:func:`redact`). A key names one when the
  console and the API would mask it (:func:`tjobs.delivery.answers.is_secret_name`: ``secret``,
  ``password``, ``token``, ``api_key``, ``authorization``, ``auth``, ``credentials``, ``cookie``,
  ``session``, ``signature``, ... case and separators aside), so an entry a viewer reads holds no value
  the task's own page masks.
- **Cap.** A before or after document longer than :data:`MAX_DOCUMENT_BYTES` as JSON is replaced by
  ``{"truncated": true, "bytes": n}``.
- **Failure.** An entry that cannot be written raises :class:`tjobs.errors.AuditUnavailable` (503): the
  API answers it for the change it could not record (docs/operations.md, "Audit log").
- **Retention.** :class:`AuditRetention` deletes, every ``audit.interval_s``, the entries older than
  ``audit.retention_days``, ``audit.batch`` at a time.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from tjobs.clock import Clock
from tjobs.delivery.answers import is_secret_name
from tjobs.errors import AuditUnavailable, TjobsError
from tjobs.periodic import PeriodicPass
from tjobs.settings import AuditSettings
from tjobs.stores.contracts.audit import AuditEntry, AuditLog, AuditQuery

__all__ = ["AuditEntry", "AuditQuery", "AuditRetention", "AuditService", "document", "redact"]

logger = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 8 * 1024
REDACTED = "[redacted]"
DAY_MS = 86_400_000


def redact(value: Any) -> Any:
    """``value`` with every value under a secret-naming key replaced by :data:`REDACTED`."""
    if isinstance(value, dict):
        return {key: REDACTED if is_secret_name(str(key)) else redact(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [redact(inner) for inner in value]
    return value


def document(value: Any) -> Any:
    """What an entry keeps of a before/after value: redacted, then capped at :data:`MAX_DOCUMENT_BYTES`."""
    if value is None:
        return None
    cleaned = redact(value)
    size = len(orjson.dumps(cleaned, default=str))
    if size > MAX_DOCUMENT_BYTES:
        return {"truncated": True, "bytes": size}
    return orjson.loads(orjson.dumps(cleaned, default=str))


class AuditService:
    """Records and searches the audit entries of one store (:class:`tjobs.stores.contracts.audit.AuditLog`)."""

    def __init__(self, log: AuditLog, clock: Clock, settings: AuditSettings) -> None:
        self._log = log
        self._clock = clock
        self.retention = AuditRetention(log, clock, settings)

    async def record(self, entry: AuditEntry) -> int:
        """Append ``entry`` (its documents redacted and capped, its instant now if 0); its id.
        :class:`AuditUnavailable` if it could not be written."""
        stored = AuditEntry(
            at_ms=entry.at_ms or self._clock.now_ms(),
            actor_kind=entry.actor_kind,
            actor_name=entry.actor_name[:128],
            app_id=entry.app_id,
            action=entry.action[:64],
            object_id=entry.object_id[:200],
            before=document(entry.before),
            after=document(entry.after),
            source=entry.source[:64],
            via=entry.via,
            request_id=entry.request_id[:64],
        )
        try:
            return await self._log.append_audit(stored)
        except (TjobsError, OSError) as error:
            logger.error(
                "audit entry %s on %s not written: %s",
                stored.action,
                stored.object_id,
                error,
                extra={"action": "audit_write_failed"},
            )
            raise AuditUnavailable(stored.action, str(error)) from error

    async def search(self, query: AuditQuery) -> list[AuditEntry]:
        return await self._log.search_audit(query)


class AuditRetention(PeriodicPass):
    """Deletes the entries past ``audit.retention_days``, oldest first, ``audit.batch`` per statement."""

    name = "audit_retention"

    def __init__(self, log: AuditLog, clock: Clock, settings: AuditSettings) -> None:
        super().__init__(settings.interval_s)
        self._log = log
        self._clock = clock
        self._settings = settings

    async def run_once(self) -> int:
        cut_off_ms = self._clock.now_ms() - int(self._settings.retention_days * DAY_MS)
        purged = 0
        while True:
            gone = await self._log.purge_audit(cut_off_ms, self._settings.batch)
            purged += gone
            if gone < self._settings.batch:
                break
        if purged:
            logger.info("purged %d audit entries", purged, extra={"action": "audit_purged"})
        return purged
