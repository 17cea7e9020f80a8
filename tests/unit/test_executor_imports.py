"""The executor helper is SDK: importing it pulls in none of the server (nor a web framework)."""

from __future__ import annotations

import subprocess
import sys


def test_the_executor_helper_does_not_import_the_server() -> None:
    code = (
        "import sys, tjobs.executor; bad = [m for m in sys.modules if m.startswith(('tjobs.stores', 'tjobs.node', "
        "'tjobs.delivery', 'tjobs.cluster', 'tjobs.pools', 'fastapi', 'sqlalchemy', 'aiohttp'))]; "
        "print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
