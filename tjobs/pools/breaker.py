"""The per-executor circuit breaker (pure: ``now_ms`` is passed in).

An executor that answers ``503`` or refuses the connection is **open** (skipped) for a backoff that
doubles with every such failure in a row (``base_ms``, ``2 × base_ms``, … up to ``max_ms``). Once the
backoff has passed it is **half-open**: offered again, and the next answer decides: a success closes
it (the count starts over), another such failure opens it for the next, longer backoff. Other failures
(a ``500``, a timeout) do not open it: they say nothing about the executor being down rather than the
work failing. Breakers are per node (each node learns on its own).
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_MS = 1000
MAX_MS = 60_000
MAX_TRACKED = 100_000


@dataclass(slots=True)
class _State:
    failures: int
    open_until_ms: int


class CircuitBreakers:
    def __init__(self, base_ms: int = BASE_MS, max_ms: int = MAX_MS) -> None:
        self._base_ms = base_ms
        self._max_ms = max_ms
        self._states: dict[tuple[str, str, str], _State] = {}

    def is_open(self, key: tuple[str, str, str], now_ms: int) -> bool:
        """Whether the executor ``key`` = (app id, pool, executor id) is to be skipped at ``now_ms``."""
        state = self._states.get(key)
        return state is not None and now_ms < state.open_until_ms

    def failed(self, key: tuple[str, str, str], now_ms: int) -> int:
        """Record a ``503`` or a refused connection; answers until when the executor is skipped."""
        state = self._states.get(key)
        if state is None:
            if len(self._states) >= MAX_TRACKED:
                self._states.clear()
            state = self._states[key] = _State(0, 0)
        state.failures += 1
        backoff_ms = min(self._base_ms * 2 ** min(state.failures - 1, 30), self._max_ms)
        state.open_until_ms = now_ms + backoff_ms
        return state.open_until_ms

    def succeeded(self, key: tuple[str, str, str]) -> None:
        self._states.pop(key, None)

    def open_count(self, now_ms: int) -> int:
        return sum(1 for state in self._states.values() if now_ms < state.open_until_ms)
