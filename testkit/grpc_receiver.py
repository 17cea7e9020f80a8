"""A real gRPC callback receiver for tests and examples: ``Receiver.Fire`` served by grpc.aio on loopback.

In the test's own event loop::

    async with GrpcReceiver(authorization="Bearer s3cret") as receiver:     # calls without it: UNAUTHENTICATED
        receiver.script(FireAnswer(grpc.StatusCode.UNAVAILABLE, trailing={"retry-after-ms": "2000"}))
        receiver.script(FireAnswer(delay_s=5.0), flow_id="42-1000")       # only for that flow
        ... deliver to receiver.address ("127.0.0.1:<port>") ...
        await receiver.wait_for(3)
        receiver.received          # every call that reached the handler: its fields, headers, metadata, peer
        receiver.answered          # flow ids answered OK, in order
        await receiver.stop()      # abruptly (in-flight calls are cancelled); start() again on the same port

Answers are taken in order from the flow's script first, then from the any-flow script; when a script
is used up its ``then`` answer repeats (OK when not given). An answer may wait (``delay_s``) and send
trailing metadata (``retry-after-ms``).

Run as a program (``python -m testkit.grpc_receiver [--port N] [--print-answered] [--answer-first N]``)
it serves in its own process, for benchmarks and for killing it for real: it prints its port on the
first stdout line and answers OK to everything (with ``--answer-first N``, to the first ``N`` calls only:
later calls are held unanswered, in flight until it dies); with ``--print-answered`` it prints each flow
id on its own line just before answering OK (so a killed receiver's printed ids include every call it
acknowledged); it exits when stdin closes, printing ``calls=<n> cpu_s=<seconds>`` last.
:class:`GrpcReceiverProcess` drives it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType

import grpc
from grpc import aio

from testkit.children import checkout_env
from tjobs.delivery.grpc_proto import receiver_pb2, receiver_pb2_grpc

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class FireAnswer:
    """How the receiver answers one call: ``code`` (with ``details``) after ``delay_s``, with ``trailing``
    metadata."""

    code: grpc.StatusCode = grpc.StatusCode.OK
    details: str = ""
    delay_s: float = 0.0
    trailing: Mapping[str, str] = field(default_factory=dict)


OK = FireAnswer()


@dataclass(frozen=True, slots=True)
class Fired:
    """One call as the receiver got it (``metadata`` keys as gRPC gives them: lower-case)."""

    flow_id: str
    task_id: str
    task_name: str
    scheduled_at_ms: int
    attempt: int
    payload: bytes
    headers: dict[str, str]
    metadata: dict[str, str]
    peer: str


@dataclass
class _Script:
    answers: deque[FireAnswer]
    then: FireAnswer


class _Servicer(receiver_pb2_grpc.ReceiverServicer):
    def __init__(self, receiver: GrpcReceiver) -> None:
        self._receiver = receiver

    async def Fire(  # the generated servicer's name
        self,
        request: receiver_pb2.FireRequest,
        context: aio.ServicerContext[receiver_pb2.FireRequest, receiver_pb2.FireReply],
    ) -> receiver_pb2.FireReply:
        return await self._receiver._fire(request, context)


class GrpcReceiver:
    """``Receiver.Fire`` on ``host:port`` (port 0: any free one), answering as scripted."""

    def __init__(
        self,
        port: int = 0,
        authorization: str | None = None,
        host: str = LOOPBACK,
        tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.authorization = authorization
        self.tls = tls  # (private key, certificate chain), PEM: serve TLS only
        self.received: list[Fired] = []
        self.answered: list[str] = []
        self._scripts: dict[str | None, _Script] = {}
        self._arrived = asyncio.Condition()
        self._server: aio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def script(self, *answers: FireAnswer, then: FireAnswer = OK, flow_id: str | None = None) -> None:
        """Answer calls for ``flow_id`` (or any flow) with ``answers`` in order, then ``then``."""
        self._scripts[flow_id] = _Script(deque(answers), then)

    def of(self, flow_id: str) -> list[Fired]:
        """The calls that carried ``flow_id``."""
        return [fired for fired in self.received if fired.flow_id == flow_id]

    async def wait_for(self, count: int, timeout_s: float = 5.0) -> list[Fired]:
        """Wait until ``count`` calls reached the handler; return them all."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.received) >= count)
        return self.received

    async def start(self) -> None:
        server = aio.server()
        receiver_pb2_grpc.add_ReceiverServicer_to_server(_Servicer(self), server)
        if self.tls is None:
            self.port = server.add_insecure_port(f"{self.host}:{self.port}")
        else:
            credentials = grpc.ssl_server_credentials([self.tls])
            self.port = server.add_secure_port(f"{self.host}:{self.port}", credentials)
        await server.start()
        self._server = server

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop serving; without ``grace_s`` in-flight calls are cancelled at once."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)

    async def __aenter__(self) -> GrpcReceiver:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def _fire(
        self,
        request: receiver_pb2.FireRequest,
        context: aio.ServicerContext[receiver_pb2.FireRequest, receiver_pb2.FireReply],
    ) -> receiver_pb2.FireReply:
        metadata = {str(key): str(value) for key, value in (context.invocation_metadata() or ())}
        async with self._arrived:
            self.received.append(
                Fired(
                    request.flow_id,
                    request.task_id,
                    request.task_name,
                    request.scheduled_at_ms,
                    request.attempt,
                    request.payload,
                    dict(request.headers),
                    metadata,
                    context.peer(),
                )
            )
            self._arrived.notify_all()
        if self.authorization is not None and metadata.get("authorization") != self.authorization:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad credentials")
        answer = self._next_answer(request.flow_id)
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.trailing:
            context.set_trailing_metadata(tuple(answer.trailing.items()))
        if answer.code is not grpc.StatusCode.OK:
            await context.abort(answer.code, answer.details)
        self.answered.append(request.flow_id)
        return receiver_pb2.FireReply()

    def _next_answer(self, flow_id: str) -> FireAnswer:
        script = self._scripts.get(flow_id) or self._scripts.get(None)
        if script is None:
            return OK
        return script.answers.popleft() if script.answers else script.then


# ---- in its own process -------------------------------------------------------------------------------


class GrpcReceiverProcess:
    """``python -m testkit.grpc_receiver`` as a child process: started, read, killed for real."""

    def __init__(self, port: int = 0, print_answered: bool = False, answer_first: int | None = None) -> None:
        self.port = port
        self.print_answered = print_answered
        self.answer_first = answer_first
        self.answered: list[str] = []
        """Flow ids the child acknowledged (with ``print_answered``), read from its stdout."""
        self.summary = ""
        """The child's last line after a clean stop: ``calls=<n> cpu_s=<seconds>``."""
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    async def start(self) -> None:
        command = [sys.executable, "-m", "testkit.grpc_receiver", "--port", str(self.port)]
        if self.print_answered:
            command.append("--print-answered")
        if self.answer_first is not None:
            command += ["--answer-first", str(self.answer_first)]
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=checkout_env()
        )
        assert process.stdout is not None
        try:
            async with asyncio.timeout(30):
                first = await process.stdout.readline()
            self.port = int(first)
        except BaseException:
            process.kill()
            await process.wait()
            raise
        self._process = process
        self._reader = asyncio.create_task(self._read(process))

    async def kill(self) -> None:
        """SIGKILL: the child dies mid-call, its connections reset by the kernel."""
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            await process.wait()
            await self._drain()

    async def stop(self) -> None:
        """Close the child's stdin: it stops serving, prints its summary and exits."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            async with asyncio.timeout(30):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        await self._drain()

    async def __aenter__(self) -> GrpcReceiverProcess:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.stop()

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode().strip()
            if line.startswith("calls="):
                self.summary = line
            elif line:
                self.answered.append(line)

    async def _drain(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader


class _PrintingReceiver(GrpcReceiver):
    """The program's receiver: counts calls and prints each acknowledged flow id when asked to."""

    def __init__(self, port: int, print_answered: bool, answer_first: int | None) -> None:
        super().__init__(port)
        self.calls = 0
        self._print_answered = print_answered
        self._answer_first = answer_first

    async def _fire(
        self,
        request: receiver_pb2.FireRequest,
        context: aio.ServicerContext[receiver_pb2.FireRequest, receiver_pb2.FireReply],
    ) -> receiver_pb2.FireReply:
        self.calls += 1
        if self._answer_first is not None and self.calls > self._answer_first:
            await asyncio.Event().wait()  # held: in flight until the process dies
        if self._print_answered:
            sys.stdout.write(request.flow_id + "\n")
            sys.stdout.flush()  # before the OK leaves: a killed child has printed all it acknowledged
        return receiver_pb2.FireReply()


async def _serve(port: int, print_answered: bool, answer_first: int | None) -> None:
    receiver = _PrintingReceiver(port, print_answered, answer_first)
    await receiver.start()
    sys.stdout.write(f"{receiver.port}\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.buffer.read)  # until the parent closes stdin (or dies)
    await receiver.stop(grace_s=1.0)
    sys.stdout.write(f"calls={receiver.calls} cpu_s={time.process_time():.3f}\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m testkit.grpc_receiver", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--print-answered", action="store_true")
    parser.add_argument("--answer-first", type=int, default=None)
    args = parser.parse_args()
    asyncio.run(_serve(args.port, args.print_answered, args.answer_first))


if __name__ == "__main__":
    main()
