"""What a node process does for itself: the collector's settings (the app lookups of the fire path:
tests/unit/test_app_directory.py)."""

from __future__ import annotations

import gc

from tjobs.node import GC_THRESHOLDS, settle_heap


def test_settle_heap_freezes_startup_objects_and_raises_the_thresholds() -> None:
    before = gc.get_threshold()
    gc.unfreeze()  # from CPython's defaults, not the test session's (tests/conftest.py settles its heap too)
    gc.set_threshold(700, 10, 10)
    try:
        settle_heap()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.set_threshold(*before)  # the heap stays frozen, as the session keeps it
