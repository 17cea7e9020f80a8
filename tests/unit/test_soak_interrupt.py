"""An interrupted soak cleans up: ``kill <soak>`` (SIGTERM) or SIGINT, even where a background shell left
SIGINT ignored, cancels the soak's main task so that its ``finally`` stops the nodes and the rig it
started (2026-12-03: a SIGTERM killed the driver at once and left 3 nodes, 2 MariaDB servers and etcd
running; its SIGINT, sent to a process started with ``&``, was ignored). And a round that fails stops
its one-shot stream before it closes the client the stream creates through (the same run logged
"Cannot send a request, as the client has been closed" from creates a failed round left running)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from testkit.children import REPO
from testkit.cluster_rig import now_ms
from tests.chaos.soak import rounds
from tests.chaos.soak.rounds import Round, RoundPlan

SCRIPT = textwrap.dedent(
    """
    import asyncio, signal, sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a non-interactive shell's `&` leaves it
    from tests.chaos.soak.__main__ import _run, cancel_on_signals

    async def main() -> int:
        cancel_on_signals()
        try:
            print("ready", flush=True)
            await asyncio.sleep(60)
            return 0
        finally:
            print("cleaned up", flush=True)

    try:
        sys.exit(_run(main()))
    except asyncio.CancelledError:
        sys.exit(3)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_soak_so_that_its_finally_runs(signum: signal.Signals) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
        child.send_signal(signum)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "cleaned up" in out, (out, err)
    assert child.returncode == 3, (child.returncode, err)


class FakeClient:
    def __init__(self, *_: Any) -> None:
        self.closed = False
        self.creates_after_close = 0
        self.book: Any = None

    async def create_app(self, max_concurrency: int = 1000) -> str:
        return "app"

    async def create_at(self, at_ms: int) -> int | None:
        await asyncio.sleep(0.01)
        if self.closed:
            self.creates_after_close += 1
        return 1

    async def close(self) -> None:
        self.closed = True


class FakeReceiver:
    def __init__(self, seed: int) -> None:
        self.callbacks: list[Any] = []

    def url(self) -> str:
        return "http://127.0.0.1:9/"

    async def __aenter__(self) -> FakeReceiver:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None


async def test_a_failed_round_stops_its_one_shot_stream_before_closing_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clients: list[FakeClient] = []

    def make_client(*args: Any) -> FakeClient:
        clients.append(FakeClient(*args))
        return clients[-1]

    async def no_intervals(*_: Any) -> None:
        return None

    async def fails(self: Round, until_ms: int) -> bool:
        await asyncio.sleep(0.3)
        raise OSError("the entry node timed out")

    monkeypatch.setattr(rounds, "ChaosClient", make_client)
    monkeypatch.setattr(rounds, "ChaosReceiver", FakeReceiver)
    monkeypatch.setattr(rounds, "register_intervals", no_intervals)
    monkeypatch.setattr(Round, "_quiet_moment", fails)
    now = now_ms()
    plan = RoundPlan(0, now - 4000, now + 60_000, 0, 200.0, 1.0, 1.0, 100)
    round_ = Round(None, None, plan, seed=1)  # type: ignore[arg-type]
    with pytest.raises(OSError):
        await round_.run(None)  # type: ignore[arg-type]
    await asyncio.sleep(0.5)  # a stream still running would go on creating through the closed client
    assert clients[0].closed
    assert clients[0].creates_after_close == 0
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []
