"""Reading an ISO-8601 instant from a request: the one place every ISO instant a request carries is parsed.

``datetime.fromisoformat`` is implemented in C and stops at a NUL: ``"2030-01-01T00:00:00Z\\x00junk"``
would answer 2030-01-01 and drop the rest (issue 28). So control characters (C0, DEL, C1) are refused
before the parser sees the text, and an instant without a UTC offset is refused after.
"""

from __future__ import annotations

import re
from datetime import datetime

from tjobs.clock import datetime_to_ms
from tjobs.errors import InvalidInput

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def parse_iso_instant_ms(text: str, field: str, *, expected: str = "an ISO-8601 instant") -> int:
    """``text`` (ISO-8601 with a UTC offset) as epoch ms, or :class:`InvalidInput` naming ``field``
    (code ``invalid_instant``); ``expected`` says what the field takes, for the message."""
    if _CONTROL.search(text):
        raise InvalidInput(field, f"{text!r} is not {expected}: it holds a control character", "invalid_instant")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(field, f"{text!r} is not {expected}", "invalid_instant") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidInput(field, f"{text!r} has no UTC offset (add Z or +08:00)", "invalid_instant")
    return datetime_to_ms(parsed)
