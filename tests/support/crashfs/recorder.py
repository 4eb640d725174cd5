"""The file system process's bookkeeping: inode ids, durable copies, and the event trace.

The backing directory is the volatile state: what processes on the mount see. The recorder keeps
what the durability model needs beside it, in the run's state directory:

* Inode ids of our own, so that renames and hard links are followed: a backing file's st_ino maps
  to an id (every new file or directory gets a fresh id, since the backing file system reuses
  inode numbers of deleted files; ours are never reused).
* Copy-on-fsync: an fsync of a file copies the inode's current bytes to ``blobs/<id>.<k>``, and
  only if the inode changed since its last copy; that copy is its durable content from then on.
* The trace (``trace.py``), with write events coalesced.

It never fsyncs the backing files: the backing directory models the page cache, not a disk.
"""
from __future__ import annotations

import errno
import os
import stat

from . import sparsecopy
from .trace import BLOB_DIR, WRITE_LOG, Event, TraceWriter


class Frozen(OSError):
    """The power is out: every operation after the freeze point fails like this."""

    def __init__(self):
        super().__init__(errno.EIO, "crashfs: frozen (simulated power cut)")


class Recorder:
    def __init__(self, backing: str, state_dir: str, *, freeze_after: int | None = None,
                 record_writes: bool = False):
        self.backing = backing
        self.state_dir = state_dir
        self.blob_dir = os.path.join(state_dir, BLOB_DIR)
        os.makedirs(self.blob_dir, exist_ok=True)
        self.trace = TraceWriter(state_dir)
        self.freeze_after = freeze_after
        self.frozen = False
        # Write data for torn states: each write's bytes appended here, named by the write event.
        self.write_log = open(os.path.join(state_dir, WRITE_LOG), "ab") if record_writes else None
        self._ids: dict[int, int] = {}      # backing st_ino -> our inode id
        self._next_id = 1
        self._dirty: set[int] = set()       # ids changed since their last durable copy
        self._copies: dict[int, int] = {}   # id -> copies taken so far (names the next blob)
        self._blob: dict[int, str | None] = {}   # id -> its latest copy (None: it was empty)
        self._last: Event | None = None     # last event, if it is a write still being coalesced
        self._last_fh: int | None = None
        self.n = -1
        self._record_mount()

    # ------------------------------------------------------------------ ids
    def backing_path(self, path: str) -> str:
        return self.backing + path if path != "/" else self.backing

    def _fresh_id(self, st: os.stat_result) -> int:
        ino = self._next_id
        self._next_id += 1
        self._ids[st.st_ino] = ino
        return ino

    def id_of(self, st: os.stat_result) -> int:
        """Our id of a backing inode; one we have not seen (made behind our back) gets a new id."""
        ino = self._ids.get(st.st_ino)
        return ino if ino is not None else self._fresh_id(st)

    def id_of_path(self, path: str) -> int:
        return self.id_of(os.lstat(self.backing_path(path)))

    def new_inode(self, path: str) -> int:
        """A file, directory or symlink was just made at path: it is a new inode."""
        ino = self._fresh_id(os.lstat(self.backing_path(path)))
        self._dirty.add(ino)
        return ino

    # ------------------------------------------------------------------ durable copies
    def _copy(self, ino: int, src: str | int) -> str | None:
        """A copy of the inode's bytes now (src a path or an open fd); None if it is empty."""
        size = os.fstat(src).st_size if isinstance(src, int) else os.stat(src).st_size
        if size == 0:
            return None
        k = self._copies.get(ino, 0)
        self._copies[ino] = k + 1
        name = f"{ino}.{k}"
        dst = os.path.join(self.blob_dir, name)
        if isinstance(src, int):
            fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                sparsecopy.copy_fd(src, fd)
            finally:
                os.close(fd)
        else:
            sparsecopy.copy_path(src, dst)
        return name

    def _entries(self, dir_path: str) -> dict[str, list]:
        """A directory's current names, as the durable model stores them."""
        out = {}
        with os.scandir(dir_path) as it:
            for de in it:
                st = de.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    out[de.name] = [self.id_of(st), "d"]
                elif stat.S_ISLNK(st.st_mode):
                    out[de.name] = [self.id_of(st), "l", os.readlink(de.path)]
                elif stat.S_ISREG(st.st_mode):
                    out[de.name] = [self.id_of(st), "f"]
                # sockets, fifos, devices: not part of any store we test
        return out

    def _record_mount(self) -> None:
        """Event 0: everything in the backing directory at mount is durable."""
        dirs, files = {}, {}
        root = self.id_of(os.lstat(self.backing))
        for here, _subdirs, _names in os.walk(self.backing):
            entries = self._entries(here)
            dirs[self.id_of(os.lstat(here))] = entries
            for name, ent in entries.items():
                if ent[1] == "f" and ent[0] not in files:
                    files[ent[0]] = self._copy(ent[0], os.path.join(here, name))
                    self._blob[ent[0]] = files[ent[0]]
        self.record("mount", "/", root=root, dirs=dirs, files=files)

    # ------------------------------------------------------------------ events
    def check(self) -> None:
        """Called before serving any request: after the freeze point, nothing works."""
        if self.frozen:
            raise Frozen()

    def _emit(self, event: Event) -> None:
        self.trace.append(event)

    def flush(self) -> None:
        """Write out a write event still being coalesced."""
        if self._last is not None:
            self._emit(self._last)
            self._last = self._last_fh = None

    def record(self, kind: str, path: str | None = None, path2: str | None = None, **data) -> Event:
        self.flush()
        self.n += 1
        event = Event(self.n, kind, path, path2, data)
        self._emit(event)
        self._after(event)
        return event

    def _after(self, event: Event) -> None:
        if self.freeze_after is not None and event.n >= self.freeze_after:
            self.frozen = True

    def freeze(self) -> Event:
        event = self.record("freeze")
        self.frozen = True
        return event

    def wrote(self, fh: int, ino: int, path: str | None, offset: int, data) -> None:
        """One write through open file fh: extends the last event if that was this fh's write."""
        self._dirty.add(ino)
        size = len(data)
        extent = None
        if self.write_log is not None:
            extent = [offset, size, self.write_log.tell()]
            self.write_log.write(data)
            self.write_log.flush()
        ev = self._last
        if ev is not None and self._last_fh == fh:
            d = ev.data
            d["lo"] = min(d["lo"], offset)
            d["hi"] = max(d["hi"], offset + size)
            d["count"] += 1
            d["bytes"] += size
            if extent is not None:
                d["extents"].append(extent)
            return
        self.flush()
        self.n += 1
        data_ = {"ino": ino, "lo": offset, "hi": offset + size, "count": 1, "bytes": size}
        if extent is not None:
            data_["extents"] = [extent]
        self._last = Event(self.n, "write", path, None, data_)
        self._last_fh = fh
        # A write is an event like any other for the freeze point: the next request fails.
        self._after(self._last)

    def closed(self, fh: int) -> None:
        """Open file fh was released: its coalesced write event, if still open, is complete."""
        if self._last_fh == fh:
            self.flush()

    def changed(self, ino: int) -> None:
        """The inode's content changed other than by write (truncate, fallocate, O_TRUNC)."""
        self._dirty.add(ino)

    def fsync_file(self, path: str | None, ino: int, fd: int, datasync: bool) -> Event:
        self.flush()
        if ino in self._dirty or ino not in self._blob:
            self._blob[ino] = self._copy(ino, fd)
            self._dirty.discard(ino)
        blob = self._blob[ino]
        size = os.fstat(fd).st_size
        return self.record("fsync-file", path, ino=ino, blob=blob, size=size, datasync=datasync)

    def fsync_dir(self, path: str) -> Event:
        bpath = self.backing_path(path)
        return self.record("fsync-dir", path, ino=self.id_of(os.lstat(bpath)),
                           entries=self._entries(bpath))

    def close(self) -> None:
        self.flush()
        self.trace.close()
        if self.write_log is not None:
            self.write_log.close()
