"""Executor heartbeats answered below ASGI (:mod:`tjobs.api.lean_protocol`).

Every executor of every pool sends ``PUT /v1/pools/{pool}/executors/{executor_id}/heartbeat`` every
third of its TTL (1,000 executors at a 15 s TTL: 200 a second). Through uvicorn's request cycle and the
app's ASGI layers a heartbeat cost a node several times what renewing the lease costs.
:class:`HeartbeatPath` answers a plain heartbeat itself, with the authentication, admission, answers
and metrics :mod:`tjobs.api.lean_protocol` keeps, and the same pool service call
(:meth:`tjobs.service.pools.PoolService.renew`: per-app pools, 404 for an unknown executor or another
app's, 503 when the registry does not answer).

A heartbeat the registry answers without I/O (:meth:`tjobs.service.pools.PoolService.renew_now`: the
embedded registry always; an etcd node for a lease it renewed with more than half a TTL of it left) is
answered in the parser's callback, with no task; one that needs etcd is answered by a task awaiting
:meth:`~tjobs.service.pools.PoolService.renew`. Besides what the module above leaves to ASGI, a
heartbeat with a body (``Content-Length`` other than 0; so the body limits answer as before) goes there.
"""

from __future__ import annotations

import re
import time

import orjson

from tjobs.api.lean_protocol import Answer, LeanCycle, LeanProtocol, failed, lean_heads
from tjobs.api.metrics_middleware import new_request_id
from tjobs.api.routes_pools import pool_service_of
from tjobs.cluster.base import RENEW_LATER
from tjobs.model import App
from tjobs.observability.logs import request_id
from tjobs.pools.model import Executor

# the heartbeat's path as sent, in visible ASCII (a percent-escape or a query string goes through ASGI)
_HEARTBEAT = re.compile(rb"/v1/pools/([^/?#%\x00-\x20\x7f-\xff]+)/executors/([^/?#%\x00-\x20\x7f-\xff]+)/heartbeat")


class HeartbeatPath(LeanProtocol):
    """Answers plain executor heartbeats (see the module); anything else is the next route's."""

    def _take(self) -> bool:
        return self._answer_heartbeat() or super()._take()

    def _answer_heartbeat(self) -> bool:
        parser = self.parser
        if parser.get_method() != b"PUT":
            return False
        match = _HEARTBEAT.fullmatch(self.url)
        if match is None or not self._plain():
            return False
        heads = lean_heads(self.headers)
        if heads is None or heads[2] not in (None, b"0"):  # a body goes through ASGI
            return False
        authorization, rid, _, _ = heads
        started = time.perf_counter()
        lean = self.lean
        app = lean.admit(authorization, self.client)
        if app is None:
            return False
        pool, executor_id = match[1].decode(), match[2].decode()
        cycle = LeanCycle()
        self.cycle = cycle  # type: ignore[assignment]
        rid = rid or new_request_id()
        token = request_id.set(rid)  # every log record meanwhile carries it
        try:
            answer = None if self.flow.write_paused else _answer_now(self, app, pool, executor_id, rid)
        finally:
            request_id.reset(token)
        if answer is not None:  # the registry renewed (or refused) it without I/O: answered here
            lean.at_once += 1
            lean.served += 1
            self._respond(cycle, answer, rid, started)
            return True
        self._spawn(self._heartbeat(cycle, app, pool, executor_id, rid, started), rid)
        return True

    async def _heartbeat(
        self, cycle: LeanCycle, app: App, pool: str, executor_id: str, rid: str, started: float
    ) -> None:
        lean = self.lean
        try:
            executor = await pool_service_of(lean.api.state, lean.node).renew(app, pool, executor_id)
            answer = _renewed(executor)
        except Exception as error:
            answer = failed(error, rid)
        lean.served += 1
        await self._answer_later(cycle, answer, rid, started, "PUT", lean.template)


def _answer_now(protocol: HeartbeatPath, app: App, pool: str, executor_id: str, rid: str) -> Answer | None:
    """The heartbeat's answer when the registry renews (or refuses) it without I/O
    (:meth:`tjobs.service.pools.PoolService.renew_now`); ``None`` when only an await can tell."""
    try:
        found = protocol.lean.pools.renew_now(app, pool, executor_id)
    except Exception as error:
        return failed(error, rid)
    return None if found is RENEW_LATER else _renewed(found)


def _renewed(executor: Executor) -> Answer:
    return 200, orjson.dumps({"id": executor.id, "ttl_s": executor.ttl_s}), None, None
