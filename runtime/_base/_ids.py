"""Typed identifiers and a fast monotonic ULID source.

Every event has a ULID, so generating one is on the fan-out hot path. python-ulid's
``ULID()`` costs about 4 µs (``os.urandom`` plus a 26-character encode); this generator
encodes the millisecond prefix once per millisecond and increments the random part
(ULID's monotonic mode), costing well under a microsecond. The ids are real ULIDs:
``ulid.ULID.from_str`` reads them.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import threading
import time
from typing import TYPE_CHECKING, Final, NewType

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["PLAN_ID_PATTERN", "EventId", "PlanId", "check_plan_id", "new_ulid"]

PLAN_ID_PATTERN: Final = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"
"""What a plan id may be: letters, digits, '.', '_' and '-', starting with a letter or digit,
at most 200 characters (a ULID fits). It names folders, so nothing else is allowed."""
_PLAN_ID: Final = re.compile(PLAN_ID_PATTERN)


def check_plan_id(plan_id: object) -> str:
    """Return ``plan_id`` if it is a plan id; raise :class:`ConfigError` if it is not."""
    if isinstance(plan_id, str) and _PLAN_ID.fullmatch(plan_id):
        return plan_id
    from ._exceptions import ConfigError

    raise ConfigError.at(
        "plan_id",
        f"{plan_id!r} is not a plan id: letters, digits, '.', '_' and '-', starting with a "
        "letter or digit, at most 200",
    )


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
    """Monotonic ULIDs: 48-bit milliseconds, then 80 bits that increase within a millisecond.

    The common call takes no lock: the millisecond's prefix and its counter are one
    attribute, read at once (a roll between two reads could otherwise pair a new prefix
    with the old count), and the counter is an ``itertools.count``, whose ``next`` is
    atomic under the GIL. Only the roll to a new millisecond locks.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        # 10 characters of milliseconds and 10 of the upper 50 random bits, with the count
        # of the lower 30 bits (6 characters), one per id.
        self._state: tuple[str, Iterator[int]] = ("", itertools.count())
        # Random bits from a generator seeded by the OS, not from os.urandom at each roll:
        # a roll comes every millisecond, and os.urandom gives up the GIL and takes it
        # back, which so often keeps every other thread from ever getting it (CPython
        # asks the holder to drop the GIL only after a switch interval with no switch).
        # The SQLite log's writer, the worker threads of sync validations and the Ray
        # waiter starved while a fan-out ran.
        self._random = random.Random(os.urandom(32))
        # A forked child must not draw the same bits as its parent.
        os.register_at_fork(after_in_child=self._reseed)

    def _reseed(self) -> None:
        # The child has only the thread that forked: a lock another thread held is not
        # its to wait for.
        self._lock = threading.Lock()
        self._random.seed(os.urandom(32))
        self._ms = -1

    def _roll(self, ms: int) -> None:
        with self._lock:
            if ms <= self._ms:
                return  # another thread rolled first
            rand = self._random.getrandbits(80)
            # Start in the bottom half of 30 bits: a millisecond then holds ~500 million ids
            # before the count could reach the 31st bit.
            self._state = (
                _encode(ms, 10) + _encode(rand >> 30, 10),
                itertools.count(rand & ((1 << 29) - 1)),
            )
            self._ms = ms

    def function(self) -> Callable[[], str]:
        """The generator, as a plain function with its lookups bound: two ULIDs per
        validation make the ~100 ns a bound method's attribute lookups cost show."""
        time_ns = time.time_ns
        pairs = _PAIRS
        source = self

        def new_ulid() -> str:
            """Return a new ULID string; ids made by one thread sort in the order made."""
            if time_ns() // 1_000_000 > source._ms:
                source._roll(time_ns() // 1_000_000)
            prefix, count = source._state
            low = next(count)
            return f"{prefix}{pairs[low >> 20]}{pairs[(low >> 10) & 1023]}{pairs[low & 1023]}"

        return new_ulid


new_ulid: Final = _UlidSource().function()
"""Return a new ULID string; ids made by one thread sort in the order they were made."""
