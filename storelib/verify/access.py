"""What every verify check shares (``storelib.verify.driver``): the tasks' context, problems,
whole-file access, and record reads by commitlog offset for the cross-file (``deep``) checks."""
from __future__ import annotations

import mmap
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compute import arrays, kernels
from ..io import checksum, headpages, storage
from ..codec import messages as codec, properties
from ..format import commitlog as cl
from ..format.config import StoreConfig

if TYPE_CHECKING:            # commitlog imports this module
    from .commitlog import ScanBuffers

__all__ = ["MAX_PROBLEMS_PER_FILE", "VerifyContext", "task_store", "Problem", "problem", "Found", "FileData",
           "TargetFiles", "SegmentLookup", "expected_tags_code"]

MAX_PROBLEMS_PER_FILE = 50


@dataclass(frozen=True)
class VerifyContext:
    """What the driver hands every verify task (``driver.plan``), broadcast once: the configuration
    parsed once, the commitlog's extent, and for ``deep`` the files whose units and entries the
    segment tasks check (``verify.cross``)."""
    store: str                          # the store's URI
    config: StoreConfig
    deep: bool
    segments: list                      # [(path, base offset, valid bytes)] of the commitlog
    min_phy: int
    max_phy: int
    queues: list = field(default_factory=list)          # deep: [{topic, queue_id, files: [{path, base}]}]
    index_files: list = field(default_factory=list)     # deep: [{path, header}]
    # every record's body against its BODYCRC without the other deep checks (an import's verify)
    body_crcs: bool = False
    # object stores: each file's (size, extents) as the manifest assembles it (io.fragments)
    assembled: dict = field(default_factory=dict)
    # in the driver's process only: its Store, the threads of a segment task, the scan buffers
    # handed on from segment to segment (verify.commitlog.ScanBuffers)
    local_store: storage.Store | None = None
    threads: int | None = None
    scan_buffers: ScanBuffers | None = None
    # per process: what the segment tasks read of the queue and index files once, not once per
    # segment (verify.cross)
    targets: TargetFiles = field(default_factory=lambda: TargetFiles(), compare=False)

    @property
    def cl_size(self) -> int:
        return self.config.mappedFileSizeCommitLog


def task_store(ctx: VerifyContext) -> storage.Store:
    """The task's Store: the driver's own when the tasks run in its process, else one from the URI
    that reads the files the driver mapped to objects (object stores: ``ctx.assembled``)."""
    if ctx.local_store is not None:
        return ctx.local_store
    st = storage.Store(ctx.store)
    for rel, (size, extents) in ctx.assembled.items():
        st.map_file(rel, size, extents)
    return st


@dataclass(frozen=True, order=True)
class Problem:
    """One thing verify found wrong: where (store-relative path, byte offset) and what. Problems
    sort by file, then offset; ``str()`` is the line verify prints, ``<path>@<offset>: <what>``."""
    path: str
    offset: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}@{self.offset}: {self.what}"


def problem(path: str, offset, text: str) -> Problem:
    return Problem(path, int(offset) if offset is not None else 0, text)


@dataclass(frozen=True)
class Found:
    """What a check found of a file, to hold against its manifest row: valid bytes, their
    checksum, records / units / entries; a segment also where its records stop (file position)
    and their store times."""
    valid: int
    checksum: str
    count: int
    stop: int = 0
    min_ts: int | None = None
    max_ts: int | None = None


# ---------------------------------------------------------------------------- file access
# madvise(MADV_POPULATE_READ) (Linux 5.14): map a range's pages in one call; Python's mmap module
# may not name it.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)


class FileData:
    """A whole file as a uint8 array: a read-only memory map locally (holes cost nothing)."""

    def __init__(self, store: storage.Store, rel: str):
        self.rel = rel
        size = store.size(rel)
        self.exists = size is not None
        self.size: int = size or 0             # 0 for a missing file (``exists`` says which)
        self.os_paths = store.os_paths         # read through the OS: mapped, bytes read counted
        self.path = store.path(rel)
        self.bytes_read = 0
        self._map: mmap.mmap | None = None
        if not self.exists or self.size == 0:
            self.buf = np.zeros(0, np.uint8)
        elif store.os_paths:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self.buf = np.frombuffer(self._map, dtype=np.uint8)
        else:
            self.buf = np.frombuffer(store.read(rel), dtype=np.uint8)
            self.bytes_read = self.size

    def populate(self, start: int = 0, end: int | None = None) -> None:
        """Map the pages of [start, end) that hold data (not holes: those would get page-cache
        pages) ahead of reading them: one madvise call per region costs a fraction of the page
        faults of a first read (0.6 s of CPU for a 0.8 GB segment on a busy machine)."""
        if self._map is None or _MADV_POPULATE_READ is None:
            return
        page = mmap.PAGESIZE
        for a, b in self._data_regions(start, self.size if end is None else min(end, self.size)):
            a0 = a // page * page
            try:
                self._map.madvise(_MADV_POPULATE_READ, a0, b - a0)
            except (OSError, ValueError):        # an older kernel: the reads fault the pages in
                return

    def checksum(self, end: int, threads: int = 1, head_len: int | None = None) -> tuple[str, list]:
        """The manifest checksum of bytes [0, end) (``checksum.file_checksum``: sha256 over the
        sha256 digests of 16 MiB blocks, hashed on ``threads`` threads; hashlib releases the GIL).
        ``head_len``: an index file whose row pages its head (``headpages.checksum_of``)."""
        end = min(end, self.size)
        buf = self.buf
        self.bytes_read += end if self.os_paths else 0
        if head_len is not None:
            return headpages.checksum_of(lambda pos, n: buf[pos:pos + n], head_len, end, threads)
        return checksum.file_checksum(lambda pos, n: buf[pos:pos + n], end, threads)

    def first_nonzero(self, start: int, end: int | None = None) -> int | None:
        """Offset of the first non-zero byte in [start, end), reading only data regions locally."""
        end = self.size if end is None else min(end, self.size)
        if start >= end:
            return None
        for a, b in self._data_regions(start, end):
            step = 16 << 20
            for x in range(a, b, step):
                chunk = self.buf[x:min(b, x + step)]
                if self.os_paths:
                    self.bytes_read += len(chunk)
                nz = np.flatnonzero(chunk)
                if len(nz):
                    return x + int(nz[0])
        return None

    def _data_regions(self, start: int, end: int):
        if not self.os_paths or not hasattr(os, "SEEK_DATA"):
            yield start, end
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            yield start, end
            return
        try:
            pos = start
            while pos < end:
                try:
                    d = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:          # ENXIO: no data after pos
                    return
                if d >= end:
                    return
                h = os.lseek(fd, d, os.SEEK_HOLE)
                yield d, min(h, end)
                pos = h
        finally:
            os.close(fd)


class TargetFiles:
    """The queue and index files as the segment tasks' cross-file checks (``verify.cross``) read
    them, once per verify and process instead of once per segment: ``bounds`` (filled once, under
    ``bounds_lock``, by ``verify.cross.file_bounds``), and the files' ``FileData`` kept for the next segment (most
    recently used, at most ``MAX_FILES`` of them, and on object stores, where each is a whole
    download, at most ``MAX_BYTES`` of downloaded bytes besides the one just read). Shared by the
    threads of a process; a copy pickled for another process (a Spark task) starts empty."""

    MAX_FILES = 128
    MAX_BYTES = 1 << 30

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.bounds_lock = threading.Lock()
        self.bounds: dict | None = None
        self._files: OrderedDict[str, FileData] = OrderedDict()
        self._loading: dict[str, threading.Lock] = {}
        self._bytes = 0
        self.opened = 0                       # FileData built (each an open, or a download)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._reset()

    def file(self, store: storage.Store, rel: str) -> FileData:
        """``rel``'s FileData: the one kept, else read now (once, whichever threads ask for it)."""
        with self.lock:
            fd = self._files.get(rel)
            if fd is not None:
                self._files.move_to_end(rel)
                return fd
            loading = self._loading.setdefault(rel, threading.Lock())
        with loading:                         # (a download is not made twice at once)
            with self.lock:
                fd = self._files.get(rel)
            if fd is None:
                fd = FileData(store, rel)
                with self.lock:
                    self.opened += 1
                    self._files[rel] = fd
                    self._bytes += 0 if fd.os_paths else fd.size
                    while len(self._files) > 1 and (len(self._files) > self.MAX_FILES or self._bytes > self.MAX_BYTES):
                        _, old = self._files.popitem(last=False)
                        self._bytes -= 0 if old.os_paths else old.size
        with self.lock:
            self._loading.pop(rel, None)
        return fd

    def clear(self) -> None:
        """Let go of the files kept (their maps close when no check holds them any more)."""
        with self.lock:
            self._files.clear()
            self._bytes = 0


_AT_0 = np.zeros(1, np.int64)          # a record read on its own starts its buffer


class SegmentLookup:
    """Record reads by commitlog offset for the cross-file checks (one mapping per segment).

    On an object store a segment not read yet whose records asked for are a few
    (``RANGED_RECORDS``: an index header's begin/end records) is not downloaded whole: each
    record is read by ranged reads (``RECORD_PEEK`` bytes, then the rest of a longer one)."""

    RANGED_RECORDS = 4
    RECORD_PEEK = 4096

    def __init__(self, store: storage.Store, segments: list, file_size: int):
        self.store = store
        self.by_base = {int(b): (rel, int(v)) for rel, b, v in segments}
        self.F = file_size
        self.cache: dict = {}
        self.sizes: dict[str, int] = {}

    def records(self, phys: np.ndarray):
        """Decode the records at ``phys``: (ok mask, reason per entry, decoded table of the ok ones)."""
        phys = np.asarray(phys, dtype=np.int64)
        n = len(phys)
        ok = np.zeros(n, dtype=bool)
        reason = np.array([""] * n, dtype=object)
        tables: list[pa.Table] = []
        order: list[np.ndarray] = []
        bases = phys // self.F * self.F
        for base in np.unique(bases):
            sel = np.flatnonzero(bases == base)
            seg = self.by_base.get(int(base))
            if seg is None:
                reason[sel] = f"no commitlog segment holds offset (segment {int(base):020d} missing)"
                continue
            rel, valid = seg
            pos = phys[sel] - base
            if rel not in self.cache and not self.store.os_paths and len(sel) <= self.RANGED_RECORDS:
                size = self._size(rel)
                parts = [(self._record_bytes(rel, int(p), valid, size), sel[k:k + 1], pos[k:k + 1], _AT_0, size)
                         for k, p in enumerate(pos)]
            else:
                if rel not in self.cache:
                    self.cache[rel] = FileData(self.store, rel)
                fd = self.cache[rel]
                parts = [(fd.buf, sel, pos, pos, fd.size)]
            for buf, psel, ppos, at, size in parts:
                self._decode(buf, at, psel, ppos, valid, size, ok, reason, tables, order)
        if tables:
            table = pa.concat_tables(tables)
            idx = np.concatenate(order)
            inv = np.empty(n, dtype=np.int64)
            inv[idx] = np.arange(len(idx))
        else:
            table, inv = None, None
        return ok, reason, table, inv

    @staticmethod
    def _decode(buf, at, sel, pos, valid, size, ok, reason, tables, order) -> None:
        """The records at file positions ``pos`` of a segment of ``size`` bytes (``valid`` of
        them data), read at ``at`` of ``buf`` (the whole file, or one record's bytes from its
        start to its end or the file's)."""
        good = (pos + cl.BLANK_SIZE <= min(valid, size)) & (at + cl.BLANK_SIZE <= len(buf))
        n = len(sel)
        rsize = np.zeros(n, np.int64)
        magic = np.zeros(n, np.int64)
        gp = at[good]
        if len(gp):
            rsize[good] = codec.gather_int(buf, gp + cl.POS_TOTALSIZE, cl.SIZE_TOTALSIZE)
            magic[good] = codec.gather_int(buf, gp + cl.POS_MAGIC, cl.SIZE_MAGIC)
        rec_ok = good & ((magic == cl.MAGIC_V1) | (magic == cl.MAGIC_V2)) & (rsize >= cl.MIN_RECORD_SIZE) \
            & (pos + rsize <= valid)
        reason[sel[~good]] = "offset beyond the segment's data"
        reason[sel[good & ~rec_ok]] = "no record starts there"
        idx = sel[rec_ok]
        if len(idx):
            t, fits = codec.decode_valid_records(buf, 0, at[rec_ok], body=False)
            reason[idx[~fits]] = "damaged record there (its fields do not fit its TOTALSIZE)"
            idx = idx[fits]
            tables.append(t)
            order.append(idx)
            ok[idx] = True

    def _size(self, rel: str) -> int:
        if rel not in self.sizes:
            self.sizes[rel] = self.store.size(rel) or 0          # missing: no data, as FileData
        return self.sizes[rel]

    def _record_bytes(self, rel: str, pos: int, valid: int, size: int) -> np.ndarray:
        """The bytes of the record at ``pos`` (to its TOTALSIZE or the file's end) by ranged
        reads; fewer when no record can start there (``_decode`` then reads none of them)."""
        if pos + cl.BLANK_SIZE > min(valid, size):
            return np.zeros(0, np.uint8)
        head = np.frombuffer(self.store.read(rel, pos, min(size - pos, self.RECORD_PEEK)), np.uint8)
        if len(head) < cl.BLANK_SIZE:
            return head
        total = int(codec.gather_int(head, np.array([cl.POS_TOTALSIZE]), cl.SIZE_TOTALSIZE)[0])
        end = min(size, pos + total, valid)
        if end <= pos + len(head):
            return head
        rest = np.frombuffer(self.store.read(rel, pos + len(head), end - pos - len(head)), np.uint8)
        return np.concatenate([head, rest])


def expected_tags_code(table: pa.Table, config: StoreConfig) -> np.ndarray:
    """tagsCode of decoded records (docs/FORMAT.md §2): Java hash of TAGS, or the delay deliver time."""
    n = table.num_rows
    props = arrays.as_large_string(table["properties_string"])
    pdata, poff = arrays.string_buffers(props)
    vs, ve = properties.property_spans(pdata, poff, ["TAGS", "DELAY"])
    code = np.where(vs[0] >= 0, kernels.java_hash_slices(pdata, vs[0], ve[0]).view(np.int32).astype(np.int64), 0)
    is_sched = pc.equal(table["topic"], codec.SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    ts = table["store_timestamp"].to_numpy()
    delays = config.delay_level_millis
    for i in np.flatnonzero(is_sched & (vs[1] >= 0)):       # delay messages only (few)
        d = pdata[vs[1][i]:ve[1][i]].tobytes().decode("utf-8", "replace")
        try:
            level = int(d)
        except ValueError:
            continue
        level = min(level, len(delays))
        if level > 0:
            code[i] = int(ts[i]) + delays[level - 1]
    return code.astype(np.int64) if n else np.zeros(0, np.int64)
