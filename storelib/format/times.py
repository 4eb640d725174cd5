"""Times as people write them: epoch milliseconds or ISO-8601, to the epoch ms the store keeps.

One parser for every place a time is typed or given: the ``--store-timestamp`` / ``--from`` /
``--to`` options (``cli.timeargs``) and the ``store_timestamp`` / ``born_timestamp`` fields of a
JSON lines input (``ingest.jsonrows``). A time without an offset is UTC.

``time_range_problem``: what is wrong with a time given for an option (``--store-timestamp``,
``--now``; an ingest's default store time), if anything: the store keeps epoch ms in RocketMQ's
signed 64-bit fields, and a time before 1970 is no time a broker stamps or expires by.
``query_time_problem``: the same for a time a query looks for (a ``query`` command's bounds and
times, the store browser's): any signed 64-bit value, as RocketMQ's own lookups take them
(``queryMessage``'s begin/end and ``getOffsetInQueueByTime``'s timestamp are compared as they are,
no range check), since an ingest keeps the store times its input rows carry, negative ones too.
"""
from __future__ import annotations

import datetime as dt

__all__ = ["TIME_FORMS", "MAX_TIME_MS", "MIN_TIME_MS", "time_ms", "time_range_problem", "query_time_problem"]

TIME_FORMS = "epoch milliseconds or an ISO-8601 time (e.g. 2024-06-01T08:00:00Z)"
MAX_TIME_MS = 2**63 - 1          # RocketMQ's store and born timestamps: Java longs
MIN_TIME_MS = -2**63


def time_range_problem(ms: int) -> str | None:
    """Why ``ms`` is no store time (before 1970-01-01, or past a 64-bit count of ms); None if it is one."""
    if ms < 0:
        return f"{ms} is before 1970-01-01T00:00:00Z (epoch ms 0): times are 0 .. {MAX_TIME_MS} epoch ms"
    if ms > MAX_TIME_MS:
        return f"{ms} is past the largest time a store holds ({MAX_TIME_MS} epoch ms, a signed 64-bit field)"
    return None


def query_time_problem(ms: int) -> str | None:
    """Why ``ms`` is no time a query can look for (outside a signed 64-bit count of ms); None if it is one."""
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        return f"{ms} is outside the times a store holds ({MIN_TIME_MS} .. {MAX_TIME_MS} epoch ms, a signed 64-bit field)"
    return None


def time_ms(text: object) -> int:
    """Epoch ms of ``1717200000000``, ``2024-06-01T00:00:00Z``, ``2024-06-01 08:00:00+08:00`` or
    ``2024-06-01``; ValueError for anything else."""
    s = str(text).strip()
    try:
        return int(s)
    except ValueError:
        pass
    t = dt.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)
