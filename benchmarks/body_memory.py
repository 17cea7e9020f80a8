"""How much a node's memory grows while it refuses a 256 MiB request body (issue 11: at most 2 x the cap).

Starts a real ``tjobs serve`` process (in-memory storage), creates an app, then sends 256 MiB bodies three
ways, each on a fresh connection: with a ``Content-Length`` to ``POST /v1/tasks``, chunked to
``POST /v1/tasks``, and chunked to ``POST /v1/tasks/batch``. Before each it resets the process's peak RSS
(``/proc/PID/clear_refs``) and reads its RSS; after, the peak (``VmHWM``): growth = peak - RSS before.

    .venv/bin/python -m benchmarks.body_memory [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BODY_BYTES = 256 << 20
CHUNK = b" " * (1 << 20)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def send(port: int, path: str, key: str, chunked: bool) -> tuple[int, int]:
    """Send a 256 MiB body; return (status, bytes sent before the answer or the close)."""
    sock = socket.create_connection(("127.0.0.1", port))
    framing = "transfer-encoding: chunked" if chunked else f"content-length: {BODY_BYTES}"
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\n{framing}\r\n\r\n".encode()
    )
    sock.setblocking(False)
    sent = 0
    answer = b""
    try:
        while sent < BODY_BYTES:
            try:
                answer += sock.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            piece = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
            sock.setblocking(True)
            sock.sendall(piece)
            sock.setblocking(False)
            sent += len(CHUNK)
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.setblocking(True)
    sock.settimeout(10)
    try:
        while b"\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    except OSError:
        pass
    sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return status, sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    port = free_port()
    admin_key = "tja_" + secrets.token_urlsafe(24)
    work = Path(tempfile.mkdtemp(prefix="tjobs-body-memory-"))
    config = work / "tjobs.toml"
    config.write_text(
        f'[storage]\nurls = ["memory://"]\ntopology = "1x2x4"\n[api]\nport = {port}\n'
        f'admin_key = "{admin_key}"\n[metrics]\npublic = true\n'
    )
    node = subprocess.Popen(
        [sys.executable, "-m", "tjobs.cli.main", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(work / "node.log").open("w"),
    )
    results = []
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        app = httpx.post(
            f"{base}/v1/apps", json={"name": "body-memory"}, headers={"authorization": f"Bearer {admin_key}"}
        ).json()
        settings = {"/v1/tasks": 1 << 20, "/v1/tasks/batch": 16 << 20}  # the defaults
        for path, chunked in (("/v1/tasks", False), ("/v1/tasks", True), ("/v1/tasks/batch", True)):
            Path(f"/proc/{node.pid}/clear_refs").write_text("5")  # reset the peak RSS
            before_kib = kib(node.pid, "VmRSS")
            status, sent = send(port, path, app["api_key"], chunked)
            time.sleep(0.5)
            growth_kib = kib(node.pid, "VmHWM") - before_kib
            cap = settings[path]
            results.append(
                {
                    "path": path,
                    "framing": "chunked" if chunked else "content-length",
                    "status": status,
                    "sent_mib": round(sent / 2**20, 1),
                    "cap_mib": cap / 2**20,
                    "rss_growth_mib": round(growth_kib / 1024, 1),
                    "within_2x_cap": growth_kib * 1024 <= 2 * cap,
                }
            )
    finally:
        node.terminate()
        node.wait(10)
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            print(
                f"{r['path']:<16} {r['framing']:<15} -> {r['status']}  sent {r['sent_mib']:>6} MiB  "
                f"cap {r['cap_mib']:>4} MiB  peak RSS growth {r['rss_growth_mib']:>6} MiB  "
                f"{'ok' if r['within_2x_cap'] else 'OVER 2 x cap'}"
            )
    return 0 if all(r["within_2x_cap"] and r["status"] == 413 for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
