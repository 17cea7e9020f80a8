"""What an audit entry keeps (secrets redacted, documents capped), the retention pass, and its setting."""

from __future__ import annotations

import pytest

from tjobs.service.audit import MAX_DOCUMENT_BYTES, REDACTED, AuditEntry, AuditQuery, AuditService, document
from tjobs.settings import AuditSettings, InvalidSettings, load_settings
from tjobs.stores.memory_audit import MemoryAuditLog

DAY_MS = 86_400_000


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


def test_secrets_are_redacted_wherever_they_are() -> None:
    task = {
        "name": "t",
        "callback": {
            "url": "https://x",
            "headers": {"Authorization": "Bearer s3cret", "X-Api-Key": "k", "x-order": "1"},
        },
        "targets": [{"credentials": {"user": "u"}, "name": "a"}],
        "api_key": "tja_abc",
        "secrets": ["whsec_1"],
    }
    kept = document(task)
    assert kept["callback"]["headers"] == {"Authorization": REDACTED, "X-Api-Key": REDACTED, "x-order": "1"}
    assert kept["targets"] == [{"credentials": REDACTED, "name": "a"}]
    assert (kept["api_key"], kept["secrets"], kept["name"]) == (REDACTED, REDACTED, "t")


def test_every_name_the_console_and_a_viewers_api_answers_mask_is_redacted() -> None:
    names = ["X-Auth-Key", "session_id", "pwd", "Access-Key", "x-authentication", "Proxy-Authorization"]
    kept = document({"callback": {"headers": {name: "s3cret" for name in names}}, "payload": {"kept": "yes"}})
    assert kept == {"callback": {"headers": dict.fromkeys(names, REDACTED)}, "payload": {"kept": "yes"}}


def test_a_large_document_is_kept_as_its_size() -> None:
    kept = document({"payload": "x" * (MAX_DOCUMENT_BYTES + 1)})
    assert kept["truncated"] is True and kept["bytes"] > MAX_DOCUMENT_BYTES


@pytest.mark.asyncio
async def test_the_retention_pass_deletes_only_entries_past_the_retention() -> None:
    log, clock = MemoryAuditLog(), FixedClock(100 * DAY_MS)
    service = AuditService(log, clock, AuditSettings(retention_days=90, batch=2))
    for at_ms in (1 * DAY_MS, 2 * DAY_MS, 3 * DAY_MS, 50 * DAY_MS):
        entry = AuditEntry(at_ms, "admin_key", "admin", None, "app.update", "a", None, None, "", "api")
        await service.record(entry)
    assert await service.retention.run_once() == 3  # in batches of 2, until fewer than 2 went
    assert [entry.at_ms for entry in await service.search(AuditQuery())] == [50 * DAY_MS]


def test_a_retention_of_zero_days_is_refused_naming_it() -> None:
    with pytest.raises(InvalidSettings, match=r"audit\.retention_days"):
        load_settings(None, audit={"retention_days": 0})
