"""Times and tables as a person types and reads them: epoch ms or ISO-8601 in, CSV out.

``epoch_ms`` is an argparse type: ``1717200000000``, ``2024-06-01T00:00:00Z``,
``2024-06-01 08:00:00+08:00`` or ``2024-06-01`` (a time without an offset is UTC, as the store
keeps epoch ms), 1970 or later (a time a broker stamps: an ingest's default, an expiry's now);
``query_ms`` the same for a time a query looks for: any signed 64-bit value, before 1970 too
(``times.query_time_problem``). ``iso`` writes an epoch-ms time back in ISO-8601 (UTC, milliseconds).
``write_csv`` writes dict rows with a header; maps and lists become JSON text in their cell.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json

from ..format.times import TIME_FORMS, query_time_problem, time_ms, time_range_problem

__all__ = ["epoch_ms", "query_ms", "iso", "write_csv"]


def epoch_ms(text: str) -> int:
    """argparse type: epoch milliseconds from an integer or an ISO-8601 date/time (UTC if no offset),
    refused (exit 2, before any work) outside what a broker stamps (``times.time_range_problem``)."""
    return _checked(text, time_range_problem)


def query_ms(text: str) -> int:
    """argparse type: ``epoch_ms`` for a time a query looks for: any signed 64-bit value, so that
    the messages an ingest stored with times before 1970 are found by time
    (``times.query_time_problem``)."""
    return _checked(text, query_time_problem)


def _checked(text: str, problem_of) -> int:
    try:
        ms = time_ms(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither {TIME_FORMS.replace(' or ', ' nor ', 1)}") from None
    problem = problem_of(ms)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return ms


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
# The last epoch-ms time with an ISO-8601 form of a four-digit year (9999-12-31T23:59:59.999Z).
ISO_LATEST_MS = 253_402_300_799_999


def iso(ms) -> str:
    """An epoch-ms time as ISO-8601 UTC with milliseconds ('' for None, a negative time, or one
    past the year 9999: store and born times a broker wrote may be any Java long)."""
    if ms is None or not 0 <= int(ms) <= ISO_LATEST_MS:
        return ""
    t = _EPOCH + dt.timedelta(milliseconds=int(ms))        # exact: ms / 1000 as a float rounds late times
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_csv(fh, rows) -> int:
    """Write dict rows as CSV with a header row; returns the number of rows."""
    writer = None
    n = 0
    for row in rows:
        if writer is None:
            writer = csv.writer(fh, lineterminator="\n")      # LF, as every other line we print
            writer.writerow(list(row))
        writer.writerow([json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else
                         ("" if v is None else v) for v in row.values()])
        n += 1
    return n
