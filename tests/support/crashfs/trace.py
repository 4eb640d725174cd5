"""The event trace of one crash-simulator run: what it records and how it is stored.

Every operation that changes the visible state or durability becomes one numbered event, in the
order the file system served them (it serves one request at a time, so the order is total).
Event 0 (``mount``) holds the durable state at mount: everything that was in the backing
directory. The two durability events carry what they made durable, so the durable state after
event k is a replay of events 0..k (see ``durable.py``):

* ``fsync-file``: ``ino`` (our inode id) and ``blob``, the name of a copy of the inode's bytes
  taken at that fsync under ``blobs/`` (None: the inode was empty);
* ``fsync-dir``: ``ino`` of the directory and ``entries``, its names at that fsync, each
  ``[ino, kind]`` with kind ``f`` (file), ``d`` (directory) or ``l`` (symlink, then its target
  as a third item).

The other kinds (``create``, ``mkdir``, ``symlink``, ``rename``, ``link``, ``unlink``, ``rmdir``,
``truncate``, ``fallocate``, ``write``, ``mark``, ``freeze``) change nothing durable; they are
there to cut at and to read. ``write`` events are coalesced: consecutive writes through one open
file, with nothing else in between, are one event (``lo``/``hi`` the byte range they touched,
``count`` writes, ``bytes`` written, and ``extents`` ``[offset, length, log_offset]`` into
``writes.bin`` when the run records write data for torn states).

On disk: ``trace.jsonl`` in the run's state directory, one JSON object per line, appended (and
flushed, not fsync'd: it only has to outlive the file system process) as events happen.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

TRACE_FILE = "trace.jsonl"
BLOB_DIR = "blobs"
WRITE_LOG = "writes.bin"

# The kinds a crash is most worth simulating after: the durability points, the namespace
# changes that crash-consistency protocols hinge on, and the test's own marks.
CUT_KINDS = ("fsync-file", "fsync-dir", "rename", "link", "mark", "freeze")


@dataclass
class Event:
    n: int
    kind: str
    path: str | None = None
    path2: str | None = None            # rename's and link's destination
    data: dict[str, Any] = field(default_factory=dict)   # everything else, by kind

    def to_json(self) -> str:
        rec = {"n": self.n, "kind": self.kind}
        if self.path is not None:
            rec["path"] = self.path
        if self.path2 is not None:
            rec["path2"] = self.path2
        rec.update(self.data)
        return json.dumps(rec, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> "Event":
        rec = json.loads(line)
        n, kind = rec.pop("n"), rec.pop("kind")
        return cls(n, kind, rec.pop("path", None), rec.pop("path2", None), rec)

    def __str__(self) -> str:
        where = self.path if self.path2 is None else f"{self.path} -> {self.path2}"
        extra = self.data.get("label", "")
        return " ".join(x for x in (f"#{self.n}", self.kind, where, extra) if x)


class TraceWriter:
    """Appends events to trace.jsonl (the file system process's side)."""

    def __init__(self, state_dir: str):
        self._f = open(os.path.join(state_dir, TRACE_FILE), "a", encoding="utf-8")

    def append(self, event: Event) -> None:
        self._f.write(event.to_json() + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_trace(state_dir: str) -> list[Event]:
    """The events recorded so far, by number. A line being written as we read is left out."""
    events = []
    try:
        with open(os.path.join(state_dir, TRACE_FILE), encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):
                    events.append(Event.from_json(line))
    except FileNotFoundError:
        return []
    events.sort(key=lambda e: e.n)
    return events
