"""The Python executor helper (:mod:`tjobs.executor`) serving in a process of its own, for the e2e tests.

The child (``python -m tests.e2e.executor_process CONFIG``, CONFIG one JSON object) joins pool ``pool`` of
the node at ``tjobs_url`` and serves its callbacks under uvicorn with one run handler (``run=True``) that
never finishes on its own: it waits for ``job.run.cancelled`` (up to ``give_up_s``), which the helper sets
when the answer to a report says ``cancel_requested`` or a heartbeat is answered ``409`` (the run timed
out, or another attempt runs). It appends one JSON line per event to the ``events`` file:

* ``ready`` (the helper registered and the server listens), with ``executor_id``;
* ``started`` and ``told_to_stop`` (or ``gave_up``) of each run, with ``flow_id`` and ``attempt``;
* ``report``: every report the helper sent, with its ``status``, ``attempt`` and the ``answer``'s code.

The parent side is :func:`executor_process`: it starts the child, waits for ``ready`` and stops it with
SIGTERM at exit (uvicorn then runs the lifespan's shutdown: the helper deregisters).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.children import checkout_env
from testkit.ports import free_port


@dataclass(frozen=True)
class ExecutorProcess:
    pid: int
    events_path: Path
    log_path: Path

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The child's events so far, oldest first (only those of ``kind`` when given)."""
        lines = self.events_path.read_text().splitlines() if self.events_path.exists() else []
        parsed = [json.loads(line) for line in lines if line.strip()]
        return [e for e in parsed if kind is None or e["event"] == kind]

    async def wait_for(self, kind: str, count: int = 1, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        """The first ``count`` events of ``kind``, once the child has written them."""
        deadline = time.monotonic() + timeout_s
        while len(found := self.events(kind)) < count:
            assert time.monotonic() < deadline, (kind, count, self.events(), self.log_path.read_text()[-2000:])
            await asyncio.sleep(0.02)
        return found[:count]


@contextlib.contextmanager
def executor_process(
    work_dir: Path,
    *,
    tjobs_url: str,
    api_key: str,
    secrets: list[str],
    pool: str,
    heartbeat_s: float,
    give_up_s: float = 30.0,
    ready_timeout_s: float = 30.0,
) -> Iterator[ExecutorProcess]:
    work_dir.mkdir(parents=True, exist_ok=True)
    events_path, log_path = work_dir / "events.jsonl", work_dir / "executor.log"
    config = {
        "tjobs_url": tjobs_url,
        "api_key": api_key,
        "secrets": secrets,
        "pool": pool,
        "port": free_port(),
        "heartbeat_s": heartbeat_s,
        "give_up_s": give_up_s,
        "events": str(events_path),
    }
    with log_path.open("ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.executor_process", json.dumps(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=checkout_env(),
        )
    handle = ExecutorProcess(child.pid, events_path, log_path)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while not handle.events("ready"):
            code = child.poll()
            assert code is None, f"the executor exited with {code}:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the executor was not ready:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.05)
        yield handle
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


# ---- the child ----------------------------------------------------------------------------------------


async def _serve(config: dict[str, Any]) -> None:
    import httpx
    import uvicorn

    from tjobs.executor import Executor, Job

    events = Path(config["events"])

    def event(kind: str, **fields: Any) -> None:
        with events.open("a") as out:  # one whole line a write: the parent never reads half an event
            out.write(json.dumps({"event": kind, "at": time.time(), **fields}) + "\n")

    async def reported(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.request.url.path.endswith("/report"):
            body = json.loads(response.request.content)
            flow_id = response.request.url.path.split("/")[-2]
            event(
                "report",
                flow_id=flow_id,
                status=body["status"],
                attempt=body.get("attempt"),
                answer=response.status_code,
            )

    http = httpx.AsyncClient(
        base_url=config["tjobs_url"],
        headers={"authorization": f"Bearer {config['api_key']}"},
        timeout=5.0,
        event_hooks={"response": [reported]},
    )
    port = config["port"]
    executor = Executor(
        config["tjobs_url"],
        config["api_key"],
        pool=config["pool"],
        address=f"http://127.0.0.1:{port}/",
        signing_secrets=config["secrets"],
        http=http,
        run_heartbeat_s=config["heartbeat_s"],
    )

    @executor.handler("/", run=True)
    async def until_told(job: Job) -> dict[str, str]:
        assert job.run is not None
        event("started", flow_id=job.flow_id, attempt=job.attempt)
        try:
            await asyncio.wait_for(job.run.cancelled.wait(), config["give_up_s"])
        except TimeoutError:
            event("gave_up", flow_id=job.flow_id, attempt=job.attempt)
            raise
        event("told_to_stop", flow_id=job.flow_id, attempt=job.attempt)
        return {"stopped": "on request"}

    server = uvicorn.Server(
        uvicorn.Config(executor.asgi_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving  # raises what stopped it
            return
        await asyncio.sleep(0.02)
    event("ready", executor_id=executor.executor_id)
    await serving


if __name__ == "__main__":
    asyncio.run(_serve(json.loads(sys.argv[1])))
