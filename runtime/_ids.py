"""Typed identifiers and a fast monotonic ULID source.

Every event has a ULID, so generating one is on the fan-out hot path. python-ulid's
``ULID()`` costs about 4 µs (``os.urandom`` plus a 26-character encode); this generator
encodes the millisecond prefix once per millisecond and increments the random part
(ULID's monotonic mode), costing well under a microsecond. The ids are real ULIDs:
``ulid.ULID.from_str`` reads them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final, NewType

__all__ = ["EventId", "PlanId", "new_ulid"]

PlanId = NewType("PlanId", str)
"""A ULID naming one plan run."""
EventId = NewType("EventId", str)
"""A ULID naming one event."""

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base32
# Two characters encode 10 bits; a table of 1024 pairs makes encoding three lookups.
_PAIRS: Final = tuple(a + b for a in _ALPHABET for b in _ALPHABET)


def _encode(value: int, chars: int) -> str:
    out = []
    for _ in range(chars):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


class _UlidSource:
    """Monotonic ULIDs: 48-bit milliseconds, then 80 bits that increase within a millisecond."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._prefix = ""
        self._high = 0  # the upper 50 random bits, fixed within a millisecond (10 chars)
        self._low = 0  # the lower 30 bits, incremented per id (6 chars)

    def _roll(self, ms: int) -> None:
        rand = int.from_bytes(os.urandom(10), "big")
        self._ms = ms
        self._high = rand >> 30
        # Start low in the bottom half so a millisecond can hold ~500 million ids.
        self._low = rand & ((1 << 29) - 1)
        self._prefix = _encode(ms, 10) + _encode(self._high, 10)

    def __call__(self) -> str:
        ms = time.time_ns() // 1_000_000
        with self._lock:
            if ms > self._ms:
                self._roll(ms)
            else:
                self._low += 1
                if self._low >= 1 << 30:  # pragma: no cover - half a billion ids in 1 ms
                    self._high += 1
                    self._low = 0
                    self._prefix = _encode(self._ms, 10) + _encode(self._high, 10)
            low = self._low
            prefix = self._prefix
        return prefix + _PAIRS[low >> 20] + _PAIRS[(low >> 10) & 1023] + _PAIRS[low & 1023]


new_ulid: Final = _UlidSource()
"""Return a new ULID string; ids from one process sort in the order they were made."""
