"""Pacing of misfired fires: a backlog found after an outage is released at a bounded rate per app."""

from __future__ import annotations


class MisfirePacer:
    """Hands out fire slots ``1 / rate_per_s`` apart per app; pure, ``now_ms`` passed in."""

    def __init__(self, rate_per_s: float) -> None:
        if rate_per_s <= 0:
            raise ValueError("rate_per_s must be positive")
        self._gap_ms = 1000.0 / rate_per_s
        self._next_slot_ms: dict[str, float] = {}

    def slot(self, app_id: str, now_ms: int) -> int:
        start = max(float(now_ms), self._next_slot_ms.get(app_id, 0.0))
        self._next_slot_ms[app_id] = start + self._gap_ms
        return int(start)

    def forget_idle(self, now_ms: int) -> None:
        """Drop apps whose next slot is already in the past (keeps the map small)."""
        for app_id in [a for a, t in self._next_slot_ms.items() if t < now_ms]:
            del self._next_slot_ms[app_id]
