"""Service levels: every node's per-minute delivery counts, summed for the cluster."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from tjobs.model import SloCounts, SloMinute
from tjobs.stores.contracts.lifecycle import StoreLifecycle


class ServiceLevels(StoreLifecycle):
    """Minute and hour rows per node and app (:mod:`tjobs.stores.slo_hours`)."""

    @abstractmethod
    async def add_slo_minutes(self, node_id: str, minutes: Sequence[SloMinute]) -> None:
        """Add each minute's counts to ``node_id``'s row for that app and minute (created at zero), and
        to its row for that app and the minute's hour, in one transaction: a node writes only its own
        rows, so nodes never contend, counts a node adds twice for one minute (a pass within the
        minute, a restart) add up, and an hour row is always the sum of its minutes."""

    @abstractmethod
    async def sum_slo_minutes(self, app_id: str | None, from_minute: int, to_minute: int) -> SloCounts:
        """Every node's counts for the app (every app: ``None``) over minutes ``[from_minute,
        to_minute)``, summed, never the flow tables: the whole hours of the range from the hour rows,
        the minutes at its edges from the minute rows (:mod:`tjobs.stores.slo_hours`), the same counts
        as the minutes alone."""

    @abstractmethod
    async def purge_slo_minutes(self, before_minute: int, limit: int) -> int:
        """Delete what is stored of the hours wholly before ``before_minute``: up to ``limit`` hour rows
        and up to ``limit`` minute rows (retention drops whole hours, so no sum sees an hour whose
        minutes are partly gone); how many rows went."""
