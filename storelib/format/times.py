"""Times as people write them: epoch milliseconds or ISO-8601, to the epoch ms the store keeps.

One parser for every place a time is typed or given: the ``--store-timestamp`` / ``--from`` /
``--to`` options (``cli.timeargs``) and the ``store_timestamp`` / ``born_timestamp`` fields of a
JSON lines input (``ingest.jsonrows``). A time without an offset is UTC.
"""
from __future__ import annotations

import datetime as dt

__all__ = ["TIME_FORMS", "time_ms"]

TIME_FORMS = "epoch milliseconds or an ISO-8601 time (e.g. 2024-06-01T08:00:00Z)"


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
