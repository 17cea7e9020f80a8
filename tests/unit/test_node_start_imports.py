"""A node starts without loading the libraries of what it does not use.

Dozens of tests start real node processes, and every ``tjobs serve`` pays for each import again. What a
node needs only for a feature it may never use is loaded on first use instead: each protocol's client
library with its transport (:mod:`tjobs.delivery.router`), aiohttp with the ``aiohttp`` callback transport
(:func:`tjobs.delivery.wiring.build_http_transport`), Jinja2 with the first console page
(:mod:`tjobs.console.context`), Alembic with ``tjobs migrate`` (the start-up schema check reads the
migration files itself: :mod:`tjobs.stores.schema_revision`), the SDK (httpx) and rich with the CLI
commands that use them (:mod:`tjobs.cli.lazy_commands`). These tests pin that in fresh interpreters,
without timing anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tjobs.settings import load_settings
from tjobs.stores.migrate import migrate
from tjobs.stores.schema_revision import MIGRATIONS_DIR, known_revisions

LOADED_ON_FIRST_USE = (
    *("grpc", "aio_pika", "aiormq", "nats", "redis"),  # the protocol transports' libraries
    *("aiohttp", "jinja2", "alembic", "httpx", "rich"),
)

_REPORT = """
import json, sys
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[1])))
print(json.dumps(loaded))
"""

_START_A_NODE = """
import asyncio, json, os, signal, sys

import tjobs.cli.main  # what `tjobs serve` imports before it runs the node
from tjobs.api.server import run, serve
from tjobs.settings import load_settings

settings = load_settings(
    None,
    storage={"urls": [sys.argv[2]], "topology": "1x2x4"},
    api={"host": "127.0.0.1", "port": 0, "admin_key": "tja_" + "Zq8x" * 8},
)

async def listening(node):
    loaded = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[1])))
    print(json.dumps(loaded), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # the node's own stop: hand off and close

run(serve(settings, after_start=listening))
"""


def _loaded_in_fresh_interpreter(code: str, *args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(LOADED_ON_FIRST_USE), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_cli_and_the_node_server_loads_no_library_of_an_unused_feature() -> None:
    assert _loaded_in_fresh_interpreter("import tjobs.cli.main, tjobs.api.server, tjobs.node" + _REPORT) == []


async def test_a_node_on_sqlite_is_listening_without_any_library_of_an_unused_feature(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'data'}"
    await migrate(load_settings(None, storage={"urls": [url], "topology": "1x2x4"}).storage)
    assert _loaded_in_fresh_interpreter(_START_A_NODE, url) == []


def test_the_start_up_schema_check_knows_the_revisions_without_alembic() -> None:
    code = "from tjobs.stores.schema_revision import known_revisions; known_revisions()" + _REPORT
    assert _loaded_in_fresh_interpreter(code) == []


def test_the_start_up_schema_check_reads_the_same_revisions_as_alembic() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS_DIR))
    expected = (script.get_current_head(), frozenset(revision.revision for revision in script.walk_revisions()))
    assert known_revisions() == expected
