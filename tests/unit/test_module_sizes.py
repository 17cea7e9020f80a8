"""No product module over 700 lines (issue 26): past that a module holds more than one concept, and the
twin or the service it grew from is cut by role instead (as the memory twin's runs, accounts and service
levels were)."""

from __future__ import annotations

from pathlib import Path

import tjobs

LIMIT = 700


def test_no_module_of_tjobs_is_over_the_limit() -> None:
    root = Path(tjobs.__file__).parent
    sizes = {path.relative_to(root.parent): len(path.read_text().splitlines()) for path in root.rglob("*.py")}
    assert len(sizes) > 100, "the package's modules were not found"
    assert {path: lines for path, lines in sizes.items() if lines > LIMIT} == {}
