"""The search bench's console pages."""

from __future__ import annotations

import pytest

from benchmarks.search import CONSOLE_PAGES, linked_pages


def test_the_console_pages_timed_cover_every_page_an_operator_opens() -> None:
    paths = {path.split("?")[0] for _, path in CONSOLE_PAGES}
    assert paths >= {
        "/console/",
        "/console/tasks",
        "/console/flows",
        "/console/dead-letters",
        "/console/apps",
        "/console/apps/app-1",
        "/console/targets",
        "/console/cluster",
        "/console/schedules/preview",
    }


def test_task_and_flow_pages_are_found_by_the_lists_links() -> None:
    tasks_page = '<a href="/console/tasks?app=app-1&amp;status=paused">paused</a><a href="/console/tasks/123456">t</a>'
    task_page = '<a href="/console/flows?app=app-1">flows</a><a href="/console/flows/987-1">f</a>'
    assert linked_pages(tasks_page, task_page) == (
        ("console task", "/console/tasks/123456"),
        ("console task flows", "/console/tasks/123456/flows"),
        ("console flow", "/console/flows/987-1"),
    )
    with pytest.raises(RuntimeError):
        linked_pages("<p>no tasks</p>", task_page)
