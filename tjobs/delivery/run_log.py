"""A flow's run log (README "Job runs"): the lines its executors sent, kept with the flow in
``flows_TT.run_log``, one JSON object a line (``{"at": ms, "attempt": n, "line": "..."}``), appended in
place up to ``runs.max_log_lines`` over all the flow's runs; a line longer than ``runs.max_log_line_bytes``
(UTF-8) is cut there. Pure: the clock's ``now`` is passed in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tjobs.errors import InvalidInput, known_object
from tjobs.settings import RunSettings

LOG_FIELDS = frozenset({"lines", "attempt"})


@dataclass(frozen=True, slots=True)
class LogLines:
    """The lines of one log call, cut to their byte cap (``truncated``: how many were cut)."""

    lines: tuple[str, ...]
    attempt: int | None
    truncated: int

    def encoded(self, at_ms: int, attempt: int, count: int) -> str:
        """The first ``count`` lines as the log stores them."""
        return "".join(
            orjson.dumps({"at": at_ms, "attempt": attempt, "line": line}).decode() + "\n" for line in self.lines[:count]
        )


def parse_log_lines(body: Any, settings: RunSettings) -> LogLines:
    """A log call's body ``{"lines": [...], "attempt"?: n}``: 422 naming the field that is wrong."""
    known_object(body, LOG_FIELDS)
    raw = body.get("lines")
    cap = settings.max_log_lines_per_call
    if not isinstance(raw, list) or not 1 <= len(raw) <= cap:
        raise InvalidInput("lines", f"must be a list of 1..{cap} strings")
    attempt = body.get("attempt")
    if attempt is not None and (type(attempt) is not int or attempt < 1):
        raise InvalidInput("attempt", "must be the attempt number (the tjobs-attempt header), 1 or more")
    lines: list[str] = []
    truncated = 0
    for index, line in enumerate(raw):
        if not isinstance(line, str):
            raise InvalidInput(f"lines[{index}]", "must be a string")
        encoded = line.encode()
        if len(encoded) > settings.max_log_line_bytes:
            line = encoded[: settings.max_log_line_bytes].decode(errors="ignore")
            truncated += 1
        lines.append(line)
    return LogLines(tuple(lines), attempt, truncated)


def log_entries(text: str | None) -> list[dict[str, Any]]:
    """The stored log as its entries, oldest first."""
    if not text:
        return []
    return [orjson.loads(line) for line in text.splitlines() if line]
