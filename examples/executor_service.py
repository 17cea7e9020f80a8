"""An executor service: a FastAPI instance that joins a tjobs executor pool and runs the jobs routed to it.

Start a few (each on its own port), then register a task whose callback names the pool::

    export TJOBS_URL=http://127.0.0.1:8080 TJOBS_API_KEY=... TJOBS_SIGNING_SECRETS=whsec_...
    python examples/executor_service.py --port 9001 --zone z1 &
    python examples/executor_service.py --port 9002 --zone z2 &
    curl -s -X POST $TJOBS_URL/v1/tasks -H "Authorization: Bearer $TJOBS_API_KEY" \\
        -H 'content-type: application/json' -d '{"name": "refresh-caches",
        "schedule": {"kind": "cron", "expr": "*/1 * * * *"},
        "callback": {"pool": {"name": "cache-refresh", "mode": "all", "path": "/refresh"}}}'

Each instance registers into the pool on start-up with its own address, heartbeats, verifies every
callback's signature, runs the handler once per flow (and shard item), and deregisters on shutdown
(Ctrl-C). ``--record FILE`` appends one
JSON line per job run (what the tests count). Also servable by uvicorn with the same settings in the
environment: ``uvicorn --factory examples.executor_service:create_app --port 9001``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from tjobs.executor import Executor, Job


def create_app(options: argparse.Namespace | None = None) -> FastAPI:
    options = options or parse_args([])
    address = options.address or f"http://{options.host}:{options.port}/tjobs/"
    executor = Executor(
        options.tjobs_url,
        options.api_key,
        pool=options.pool,
        address=address,
        signing_secrets=[s for s in options.signing_secrets.split(",") if s],
        executor_id=options.executor_id,
        zone=options.zone,
        ttl_s=options.ttl_s,
    )

    @executor.handler("/")
    async def run(job: Job) -> None:
        shard = "" if job.shard_index is None else f" item {job.shard_index}/{job.shard_total}"
        print(f"{executor.executor_id}: flow {job.flow_id}{shard} attempt {job.attempt}: {job.payload}", flush=True)
        if options.record:
            line: dict[str, Any] = {
                "executor": executor.executor_id,
                "zone": options.zone,
                "flow_id": job.flow_id,
                "attempt": job.attempt,
                "shard_index": job.shard_index,
                "path": job.path,
                "at_ns": time.time_ns(),
            }
            await asyncio.to_thread(_append, options.record, json.dumps(line))

    app = FastAPI(title="tjobs executor example", lifespan=executor.lifespan)
    app.mount("/tjobs", executor.asgi_app())

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"executor": executor.executor_id, "jobs_run": executor.jobs_run}

    return app


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as record:
        record.write(line + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tjobs-url", default=env("TJOBS_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--api-key", default=env("TJOBS_API_KEY", ""))
    parser.add_argument("--signing-secrets", default=env("TJOBS_SIGNING_SECRETS", ""), help="comma-separated")
    parser.add_argument("--pool", default=env("TJOBS_POOL", "cache-refresh"))
    parser.add_argument("--zone", default=env("TJOBS_ZONE", ""))
    parser.add_argument("--executor-id", default=env("TJOBS_EXECUTOR_ID"))
    parser.add_argument("--address", default=env("TJOBS_EXECUTOR_ADDRESS"), help="default http://HOST:PORT/tjobs/")
    parser.add_argument("--ttl-s", type=int, default=int(env("TJOBS_EXECUTOR_TTL_S", "10")))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(env("PORT", "9001")))
    parser.add_argument("--record", default=env("TJOBS_EXECUTOR_RECORD"), help="append a JSON line per job")
    return parser.parse_args(argv)


def main() -> None:
    options = parse_args()
    uvicorn.run(create_app(options), host=options.host, port=options.port, log_level="warning")


if __name__ == "__main__":
    main()
