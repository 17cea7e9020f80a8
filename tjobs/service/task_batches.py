"""What the tasks of one batch create share, worked out once per batch (issue 29: batched registration).

A batch of 1,000 tasks usually repeats one callback (the same URL, method and headers); parsing and
checking it per task was the largest part of building a batch's tasks. :class:`BatchShapes` keeps, for
the duration of one batch, the spec each distinct callback request parsed to, keyed by the request's
exact JSON text (``orjson``: ``1``, ``1.0`` and ``true`` stay distinct, key order counts), so a
callback is parsed once per distinct text. Parsing is a pure function of that text, the app (its
``callback_defaults``) and the node's limits, all fixed for the batch, so every task gets the spec (and
an invalid one the same field-named error, never cached) it would get alone. The spec is immutable
(:class:`tjobs.specs.CallbackSpec`), so tasks may share one.

A task without a key goes to a random shard. Drawn per task, the 1,000 tasks of a batch land in ~440 of
the default topology's 512 shard tables: ~440 one- or two-row ``INSERT`` statements in the batch's
transaction, where MariaDB pays per statement (parse, open and lock the table). A batch draws a random
shard per :data:`SHARD_RUN` keyless tasks in a row instead, so its inserts are ~32 statements of ~32 rows;
every shard is still equally likely for every task, and the tasks a batch registers together, often due
together, also fire in fewer statements (a fire's flow and next-run writes are grouped per shard table).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from tjobs.model import MisfirePolicy
from tjobs.specs import CallbackSpec, ScheduleKind

SHARD_RUN = 32
"""Tasks without a key placed in one shard in a row (see the module)."""


class BatchShapes:
    """The callback specs of one batch, by the exact JSON text of their requests (see the module)."""

    __slots__ = ("_callbacks", "_default_policy", "_left", "_parse", "_pick_shard", "_policies", "_shard")

    def __init__(
        self,
        parse_callback: Callable[[Any], CallbackSpec],
        pick_shard: Callable[[], int],
        default_policy: Callable[[ScheduleKind], MisfirePolicy],
    ) -> None:
        self._parse = parse_callback
        self._callbacks: dict[bytes, CallbackSpec] = {}
        self._pick_shard = pick_shard
        self._shard = 0
        self._left = 0
        self._default_policy = default_policy
        self._policies: dict[ScheduleKind, MisfirePolicy] = {}

    def default_policy(self, kind: ScheduleKind) -> MisfirePolicy:
        """The misfire policy of a task of ``kind`` that names none: ``default_policy(kind)`` (the settings'
        ``scheduler.misfire_default_<kind>``, a lookup by a formatted name) asked once per kind a batch."""
        policy = self._policies.get(kind)
        if policy is None:
            policy = self._policies[kind] = self._default_policy(kind)
        return policy

    def keyless_shard(self) -> int:
        """The shard of the next task without a key: one ``pick_shard`` gives, kept for
        :data:`SHARD_RUN` such tasks in a row."""
        if not self._left:
            self._shard, self._left = self._pick_shard(), SHARD_RUN
        self._left -= 1
        return self._shard

    def callback(self, request: Any) -> CallbackSpec:
        """The spec of a callback request: parsed by ``parse_callback`` the first time its text is seen
        (an error is raised, and remembered nowhere, each time)."""
        if type(request) is not dict:
            return self._parse(request)
        try:
            text = orjson.dumps(request)
        except orjson.JSONEncodeError:  # not JSON (a caller other than the API): parsed on its own
            return self._parse(request)
        spec = self._callbacks.get(text)
        if spec is None:
            spec = self._callbacks[text] = self._parse(request)
        return spec
