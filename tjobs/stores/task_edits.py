"""An owner's edit applied to a stored task row: the one rule every store follows (pure).

See :meth:`tjobs.stores.base.TaskStore.edit_task` for the contract; a store locks the row, calls
:func:`edited_row` and writes what it returns.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from tjobs.errors import VersionConflict
from tjobs.model import Task, TaskStatus
from tjobs.stores.base import EDITABLE_FIELDS


def check_fields(fields: Collection[str]) -> None:
    unknown = set(fields) - EDITABLE_FIELDS
    if unknown:
        raise ValueError(f"not editable task fields: {sorted(unknown)}")


def edited_row(
    stored: Task,
    task: Task,
    fields: Collection[str],
    expected_revision: int | None,
    from_status: TaskStatus | None,
) -> Task | None:
    """The row after the edit, or ``None`` when ``from_status`` does not match (nothing to write).

    Raises :class:`VersionConflict` if ``expected_revision`` is given and the row is elsewhere.
    """
    if expected_revision is not None and stored.revision != expected_revision:
        raise VersionConflict(stored.id, expected_revision, stored.revision)
    if from_status is not None and stored.status is not from_status:
        return None
    changes: dict[str, object] = {name: getattr(task, name) for name in fields}
    if "schedule" in fields:
        changes["next_run_at_ms"] = task.next_run_at_ms
        changes["fire_count"] = 0
        if "status" not in fields and stored.status is TaskStatus.COMPLETED:
            changes["status"] = TaskStatus.ACTIVE
    return replace(
        stored,
        **changes,  # type: ignore[arg-type]
        updated_at_ms=task.updated_at_ms,
        version=stored.version + 1,
        revision=stored.revision + 1,
    )
