"""Lengths of time as the console writes them ("850 ms", "12.5 s", "3 min 05 s", "2 h 10 min", "3 d 4 h"):
the ages of heartbeats and published figures, the time left on a lease. Pure."""

from __future__ import annotations

MS_PER_S = 1_000
MS_PER_MIN = 60 * MS_PER_S
MS_PER_H = 60 * MS_PER_MIN
MS_PER_D = 24 * MS_PER_H


def duration(ms: int | float | None) -> str:
    """``ms`` for people: two units at most, never a negative length ("—" for ``None``)."""
    if ms is None:
        return "—"
    ms = max(int(ms), 0)
    if ms < MS_PER_S:
        return f"{ms} ms"
    if ms < 10 * MS_PER_S:
        return f"{ms / MS_PER_S:.1f} s"
    if ms < MS_PER_MIN:
        return f"{ms // MS_PER_S} s"
    if ms < MS_PER_H:
        return f"{ms // MS_PER_MIN} min {ms % MS_PER_MIN // MS_PER_S:02d} s"
    if ms < MS_PER_D:
        return f"{ms // MS_PER_H} h {ms % MS_PER_H // MS_PER_MIN:02d} min"
    return f"{ms // MS_PER_D} d {ms % MS_PER_D // MS_PER_H} h"
