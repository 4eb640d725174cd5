"""Find a message: the lookups of ``rocketlake query`` asked from a form, and their CSV.

Each mode is the command's (``key``, ``id``, ``unique-key``, ``offset``, ``range``), answered by the
same ``StoreReader`` calls (``range``: ``read.localscan``, what ``query range --local always``
runs), paged by the same ``--limit`` / ``--after`` rules, so a page and its CSV equal what the
command prints for ``Query.argv``. The CSV is written by the command's own writer
(``cli.query.Output``). A message's body is shown as text and as a hex dump, and downloaded as
its bytes.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cli.query import Output, parse_after
from ..cli.timeargs import iso, query_ms
from ..errors import BadInput
from ..format.records import decode_msg_id, message_row
from ..io.storage import Store
from .storeview import as_int

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MODES", "Query", "Found", "find", "display_rows", "csv_text", "hex_dump", "message_fields",
           "HEX_LIMIT", "PAGE_ROWS", "CSV_ROWS", "csv_cut"]

MODES = ("key", "id", "unique-key", "offset", "range")
HEX_LIMIT = 64 << 10            # a body's hex dump on the page: its first 64 KiB (the download has all)
PAGE_ROWS = 1000                # rows a result page shows at most (a browser stays usable)
CSV_ROWS = 100_000              # rows a CSV download holds at most (built in the server's memory)


@dataclass
class Query:
    """One lookup as the form asks it (the command's arguments)."""
    mode: str
    topic: str | None = None
    key: str | None = None
    msg_id: str | None = None
    queue: int | None = None
    offset: int | None = None
    count: int = 1
    begin: int | None = None
    end: int | None = None
    limit: int | None = None
    after: str | None = None
    body_as: str = "base64"

    @classmethod
    def from_params(cls, p) -> "Query":
        mode = p.get("mode") or "key"
        if mode not in MODES:
            raise BadInput(f"argument mode: invalid choice: {mode!r} (choose from {', '.join(MODES)})")
        q = cls(mode, limit=as_int(p, "limit", 0, 0) or None, after=(p.get("after") or "").strip() or None,
                body_as=p.get("body_as") or "base64")
        if q.body_as not in ("base64", "text"):
            raise BadInput(f"argument body_as: invalid choice: {q.body_as!r} (choose from base64, text)")
        if mode in ("key", "unique-key", "offset") or (mode == "range" and p.get("topic")):
            q.topic = _required(p, "topic")
        if mode in ("key", "unique-key"):
            q.key = _required(p, "key")
        if mode == "id":
            q.msg_id = _required(p, "msg_id")
        if mode == "offset":
            q.queue, q.offset = as_int(p, "queue"), as_int(p, "offset")
            q.count = as_int(p, "count", 1, 1)
        if mode in ("key", "range"):
            q.begin, q.end = _time(p, "begin", mode == "range"), _time(p, "end", mode == "range")
            if q.end is not None and q.begin is not None and q.end < q.begin:
                raise BadInput("--end is before --begin")
        return q

    def cap(self, rows: int = PAGE_ROWS) -> bool:
        """Answer at most ``rows`` rows (the paged modes' limit; ``offset``'s count); True if that
        lowered what was asked."""
        if self.mode in ("key", "unique-key", "range") and (self.limit is None or self.limit > rows):
            self.limit = rows
            return True
        if self.mode == "offset" and self.count > rows:
            self.count = rows
            return True
        return False

    def argv(self, store: str, as_of=None) -> list:
        """The ``rocketlake query`` arguments that print this page (with ``--output X.csv``: its CSV)."""
        a = ["--store", store] + (["--as-of-batch", str(as_of)] if as_of is not None else [])
        a.append(self.mode)
        if self.mode == "id" and self.msg_id is not None:
            a.append(self.msg_id)
        for flag, v in (("--topic", self.topic), ("--key", self.key), ("--queue", self.queue),
                        ("--offset", self.offset), ("--begin", self.begin), ("--end", self.end)):
            if v is not None:
                a += [flag, str(v)]
        if self.mode == "offset":
            a += ["--count", str(self.count)]
        if self.limit is not None and self.mode in ("key", "unique-key", "range"):
            a += ["--limit", str(self.limit)]
        if self.after and self.mode in ("key", "unique-key", "range"):
            a += ["--after", self.after]
        return a


def _required(p, name: str) -> str:
    v = p.get(name)
    if v is None or v == "":
        raise BadInput(f"argument {name}: required")
    return v


def _time(p, name: str, required: bool):
    text = (p.get(name) or "").strip()
    if not text:
        if required:
            raise BadInput(f"argument {name}: required (epoch ms or ISO-8601)")
        return None
    try:
        return query_ms(text)
    except argparse.ArgumentTypeError as e:
        raise BadInput(f"argument {name}: {e}") from None


@dataclass
class Found:
    """One page of results: ``messages`` (decoded records) or ``table`` (``range``'s Arrow rows)."""
    messages: list[dict[str, Any]] | None
    table: pa.Table | None
    cursor: str | None              # --after of the next page, None on the last
    what: str                       # what was asked (the "nothing found" line names it)

    @property
    def count(self) -> int:
        if self.messages is not None:
            return len(self.messages)
        return self.table.num_rows if self.table is not None else 0


def find(reader, q: Query, store_uri: str, as_of, config) -> Found:
    """The page ``rocketlake query`` prints for ``q`` (exact mode, its paging)."""
    if q.mode == "key":
        page = reader.find_by_key(q.topic, q.key, q.begin, q.end, q.limit, parse_after(q.after))
        return Found(page.messages, None, _cursor(page.next_after),
                     f"key {q.key!r} in topic {q.topic!r}")
    if q.mode == "unique-key":
        msgs, after = reader.find_by_unique_key(q.topic, q.key), parse_after(q.after)
        if after:
            msgs = [m for m in msgs if (m["store_timestamp"], m["commitlog_offset"]) > after]
        cursor = None
        if q.limit is not None and len(msgs) > q.limit:
            msgs = msgs[:q.limit]
            cursor = _cursor((msgs[-1]["store_timestamp"], msgs[-1]["commitlog_offset"]))
        return Found(msgs, None, cursor, f"unique key {q.key!r} in topic {q.topic!r}")
    if q.mode == "id":
        try:
            decode_msg_id(q.msg_id or "")
        except ValueError as e:
            raise BadInput(f"malformed message id {q.msg_id!r}: {e}") from None
        m = reader.get_by_msg_id(q.msg_id)
        return Found([m] if m is not None else [], None, None, f"message id {q.msg_id}")
    if q.mode == "offset":
        msgs = reader.get_by_queue_offset(q.topic, q.queue, q.offset, q.count)
        return Found(msgs, None, None, f"queue offset {q.offset} (+{q.count}) of {q.topic}/{q.queue}")
    return _range(q, store_uri, as_of, config)


def _range(q: Query, store_uri: str, as_of, config) -> Found:
    """``query range`` in this process: the rows of [begin, end] (and topic) in commitlog order,
    after ``--after``, a page of ``--limit``. The segments are read in order and the scan stops
    once the page is full, so a page of a big store reads only what it shows (the command reads
    the whole range, then sorts it: the same rows)."""
    import pyarrow as pa
    from ..read.queuemins import queue_minimums
    from ..read.rangescan import MESSAGE_SCHEMA, prune_segments, segment_messages
    from ..table.expired import explained
    from ..table.storefiles import open_files
    try:
        after = int(q.after) if q.after else None
    except ValueError:
        raise BadInput(f"--after {q.after!r}: expected the commitlog offset printed by the previous page") from None
    store = Store(store_uri)
    files, info = open_files(store, as_of, config)
    topics = {q.topic} if q.topic else None
    mins = queue_minimums(files)
    parts, rows = [], 0
    with explained(store, files.expired):
        for seg in sorted(prune_segments(files, info, q.begin, q.end), key=lambda s: s.base):
            if after is not None and seg.base + seg.valid <= after + 1:
                continue
            for t in segment_messages(store, seg, q.begin, q.end, topics, lo=None if after is None else after + 1,
                                      mins=mins):
                parts.append(t)
                rows += t.num_rows
                if q.limit is not None and rows > q.limit:
                    break
            if q.limit is not None and rows > q.limit:
                break
    table = pa.concat_tables(parts) if parts else MESSAGE_SCHEMA.empty_table()
    cursor = None
    if q.limit is not None and table.num_rows > q.limit:
        table = table.slice(0, q.limit)
        cursor = str(table.column("commitlog_offset")[-1].as_py())
    return Found(None, table, cursor, f"messages stored in [{q.begin}, {q.end}]"
                 + (f" in topic {q.topic!r}" if q.topic else ""))


def _cursor(after) -> str | None:
    return None if after is None else f"{after[0]}:{after[1]}"


def display_rows(found: Found) -> list:
    """The result table's rows: the public message columns, properties as a dict, times in ISO-8601."""
    rows: list[dict[str, Any]] = []
    if found.messages is not None:
        rows = [message_row(m) for m in found.messages]
    elif found.table is not None:
        rows = found.table.to_pylist()
        for r in rows:
            r["properties"] = dict(r["properties"] or [])
    for r in rows:
        r["store_time"], r["born_time"] = iso(r["store_timestamp"]), iso(r["born_timestamp"])
    return rows


def csv_text(found: Found, body_as: str) -> str:
    """The page as the command's ``--output X.csv`` writes it (its own writer, into a temporary file
    outside the store)."""
    with tempfile.TemporaryDirectory(prefix="rocketlake-ui-") as tmp:
        path = os.path.join(tmp, "found.csv")
        out = Output(path, body_as)
        if found.messages is not None:
            out.write_messages(found.messages)
        else:
            out.write_table(found.table)
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read()


def csv_cut(q: Query, found: Found, capped: bool) -> str | None:
    """What a CSV of ``found`` (asked as ``q``, cut to ``CSV_ROWS`` rows when ``capped``) leaves
    out, as one line; None when it holds every row asked for."""
    if not capped or (found.cursor is None and found.count < CSV_ROWS):
        return None
    rest = f"the next page: after={found.cursor}" if found.cursor else f"the next: offset={(q.offset or 0) + found.count}"
    return (f"cut at {CSV_ROWS} rows (a CSV download holds at most that many); {rest}; rocketlake query "
            f"{q.mode} --output FILE.csv writes every row")


def message_fields(m: dict) -> dict:
    """A decoded record as the message page shows it: every column, properties, times, body facts."""
    row = message_row(m)
    body = bytes(row.pop("body") or b"")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"row": row, "properties": row.pop("properties"), "body": body, "body_is_text": text is not None,
            "store_time": iso(row["store_timestamp"]), "born_time": iso(row["born_timestamp"])}


def hex_dump(data: bytes, limit: int = HEX_LIMIT) -> str:
    """``offset  16 hex bytes  |printable|`` lines of the first ``limit`` bytes."""
    lines = []
    for i in range(0, min(len(data), limit), 16):
        chunk = data[i:i + 16]
        hx = chunk.hex(" ")
        text = "".join(chr(c) if 32 <= c < 127 else "." for c in chunk)
        lines.append(f"{i:08x}  {hx:<47}  |{text}|")
    return "\n".join(lines)
