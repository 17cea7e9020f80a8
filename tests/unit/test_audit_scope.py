"""The audit recorder (tjobs.service.audit_scope): a no-op without a recorder; with one, a copy of
each object the services loaded, the last load winning."""

from __future__ import annotations

from dataclasses import dataclass

from tjobs.service import audit_scope


@dataclass(slots=True)
class Thing:
    name: str


def test_nothing_is_recorded_without_a_recorder() -> None:
    assert audit_scope.current.get() is None
    audit_scope.saw_before("task", 1, Thing("t"))  # tests and internal callers: no recorder, no error


def test_a_recorder_keeps_a_copy_by_kind_and_id_and_the_last_load_wins() -> None:
    recorder = audit_scope.Recorder()
    token = audit_scope.current.set(recorder)
    try:
        loaded = Thing("first")
        audit_scope.saw_before("task", 7, loaded)
        loaded.name = "changed by the service"  # after recording: the before stays as loaded
        assert recorder.before("task", "7") == Thing("first")
        audit_scope.saw_before("target", "hook", Thing("v1"))
        audit_scope.saw_before("target", "hook", Thing("v2"))  # a retried update, applied to v2
        assert recorder.before("target", "hook") == Thing("v2")
        assert recorder.before("app", "7") is None
    finally:
        audit_scope.current.reset(token)
