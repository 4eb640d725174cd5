"""The broker a mirror copies (``ops.mirror``): its store directory read only (``BrokerFiles``), its
identity, the process that mirrors it, and the checks, before each cycle copies anything, that the
broker still holds what the mirror committed.

A broker's identity is its first record's digest, recorded by the mirror's first batch; a
cycle refuses (``MirrorDiverged``, exit 3) a broker whose CommitLog no longer holds the mirror's
bytes where both hold them, or a store another process wrote into, and says what an operator
can do then (``new_mirror``): a new mirror starts at the broker's CommitLog offset 0.
"""
from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat

from ..errors import MirrorDiverged, MirrorError
from ..format import checkpoint as ckpt, commitlog, paths
from ..io import storage
from ..table.rows import FileKind
from ..table.snapshots import StoreSnapshot
from ..table.storefiles import queues_not_derived, reading_path

__all__ = ["BrokerFiles", "identity", "mirror_identity", "check_only_mirrored", "this_run", "check_one_mirror",
           "check_broker", "new_mirror", "ADOPT", "committed_bytes"]

_TAIL_CHECK = 4096              # committed bytes compared with the broker's before each cycle


class BrokerFiles:
    """A broker's store directory, read only: segment names and sizes, ``pread`` of a file (a
    regular file only: ``MirrorError`` naming anything else, never read)."""

    def __init__(self, root: str):
        if not paths.is_local(root):
            raise MirrorError(f"{root}: mirror reads a broker's store from a local directory only")
        self.root = os.path.abspath(paths.local_path(root))
        if not os.path.isdir(os.path.join(self.root, commitlog.DIR)):
            raise MirrorError(f"{self.root} is not a broker's store directory (no {commitlog.DIR}/)")
        what = queues_not_derived(storage.Store(self.root))    # a mirror derives one unit a record
        if what:
            raise MirrorError(f"{self.root}: the broker has {what}, which a mirror does not derive; nothing was mirrored")

    def segments(self) -> list:
        """(base offset, rel path) of the CommitLog segments, in offset order."""
        out = []
        for name in os.listdir(os.path.join(self.root, commitlog.DIR)):
            if len(name) == 20 and name.isdigit():
                out.append((int(name), f"{commitlog.DIR}/{name}"))
        return sorted(out)

    def read(self, rel: str, pos: int, n: int, ahead: int = 0) -> bytes:
        """Up to ``n`` bytes at ``pos`` (fewer at the end of the file; b"" if it is gone);
        ``ahead``: bytes after them the kernel starts reading meanwhile (``POSIX_FADV_WILLNEED``,
        a hint: the next window of a catch-up comes from the disk while this one is worked on)."""
        fd = self._open(rel)
        if fd is None:
            return b""
        try:
            raw = os.pread(fd, n, pos)
            if ahead and len(raw) == n and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, pos + n, ahead, os.POSIX_FADV_WILLNEED)
            return raw
        finally:
            os.close(fd)

    def _open(self, rel: str) -> int | None:
        """A read-only fd of the regular file ``rel`` (None: there is none). Opened non-blocking
        (a FIFO's open returns at once, where a blocking one waits for a writer for ever; a
        regular file's reads ignore the flag) and checked on the fd itself (``fstat``: the file
        checked is the file read, whatever replaces the name meanwhile): anything but a regular
        file is ``MirrorError`` naming it, closed unread."""
        path = os.path.join(self.root, rel)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.ENXIO:           # (a socket: no file to open)
                raise
            raise MirrorError(_not_a_file(path, f"no file ({e.strerror})")) from None
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return fd
        os.close(fd)
        raise MirrorError(_not_a_file(path, paths.special_kind(mode) or
                                      ("a directory" if stat.S_ISDIR(mode) else "no regular file")))

    def shaped(self) -> bool:
        """Whether a consume-queue file and an index file exist (``infer_config`` reads their sizes)."""
        cq = os.path.join(self.root, paths.CONSUMEQUEUE_DIR)
        has_cq = os.path.isdir(cq) and any(files for _, _, files in os.walk(cq))
        idx = os.path.join(self.root, paths.INDEX_DIR)
        return has_cq and os.path.isdir(idx) and bool(os.listdir(idx))

    def physic_timestamp(self) -> int:
        """The checkpoint's physicMsgTimestamp (0 without a checkpoint file)."""
        raw = self.read(ckpt.FILE_NAME, 0, ckpt.LAYOUT_SIZE)
        return ckpt.Checkpoint.from_bytes(raw).physic_msg_timestamp if len(raw) == ckpt.LAYOUT_SIZE else 0

    def holds(self, rel: str) -> bool:
        """Whether ``rel`` is still there: a read that found nothing of a file the broker listed
        met its retention deleting the file meanwhile (not damage) when it is gone."""
        return os.path.lexists(os.path.join(self.root, rel))

    def first_record(self, rel: str) -> bytes:
        head = self.read(rel, 0, 8)
        if len(head) < 8:
            return b""
        size = int.from_bytes(head[:4], "big", signed=True)
        return self.read(rel, 0, size) if 0 < size <= 64 << 20 else head


def _not_a_file(path: str, what: str) -> str:
    return (f"{path} is {what}, not a regular file: the mirror reads nothing but a broker's files (a read of a "
            "FIFO would block for ever, a device's bytes are no broker's); nothing was mirrored by this cycle")



def identity(broker: BrokerFiles) -> dict:
    segs = broker.segments()
    if not segs:
        raise MirrorError(f"{broker.root} holds no CommitLog segment yet: nothing to mirror")
    base, rel = segs[0]
    if base != 0:
        raise MirrorError(f"{broker.root}: the broker's CommitLog starts at {base}, not 0 (it has deleted older "
                          "segments): a mirror starts with the broker's first record; adopt a stopped copy "
                          "(rocketlake ingest --from-store) to keep what it still holds")
    first = broker.first_record(rel)
    return {"source": broker.root, "first_segment": rel.rsplit("/", 1)[-1],
            "first_record_sha256": hashlib.sha256(first).hexdigest()}


def mirror_identity(snap: StoreSnapshot, store: storage.Store) -> dict:
    for b in snap.batches:
        m = b.detail.get("mirror")
        if m:
            return m["identity"]
    raise MirrorError(f"{store.uri} is a rocketlake store but not a mirror (its first batch records no broker): "
                      "mirror into a new store")


def check_only_mirrored(snap: StoreSnapshot, store: storage.Store) -> None:
    """MirrorDiverged if a batch other than a mirror cycle's appended records to the mirror (an
    ingest, a streaming sink's commit): the broker never wrote them, so the mirror's CommitLog no
    longer follows the broker's. (An earlier version recorded mirror batches as ``ingest``: its
    batches carry ``detail.mirror`` all the same.)"""
    for b in snap.batches:
        if b.operation in ("ingest", "import") and "mirror" not in b.detail:
            raise MirrorDiverged(f"{store.uri}: batch {b.batch_id!r} ({b.operation}) appended records at "
                                 f"CommitLog offsets up to {b.max_phy_offset} that the broker never wrote: the "
                                 "mirror cannot go on; start a new mirror")


def this_run(every: float | None) -> dict:
    """What a batch records of the process that mirrored it: host, pid and the pid's start
    (``_process_start``: a pid reused by another process does not match; None without /proc:
    nobody can tell this run is alive), and ``every`` for a process that mirrors on (``mirror --every``)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid()),
            "every": every}


def _process_start(pid: int) -> str | None:
    """``<boot id>:<start time>`` of the live process ``pid`` (None: no such process, a zombie, no /proc)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh, open(f"/proc/{int(pid)}/stat") as st:
            boot, rest = fh.read().strip(), st.read().rsplit(")", 1)[1].split()
            state, started = rest[0], rest[19]
    except (OSError, IndexError, ValueError):
        return None
    return f"{boot}:{started}" if state != "Z" else None


def _runs_on(run: dict) -> bool:
    """Whether ``run`` (``this_run`` of an earlier batch) is a process on this host still running."""
    if not run.get("start") or run.get("host") != socket.gethostname():
        return False
    try:
        return _process_start(int(run["pid"])) == run["start"]
    except (TypeError, ValueError):
        return False


def check_one_mirror(snap: StoreSnapshot, store: storage.Store, me: dict) -> None:
    """MirrorError if the store's newest mirror batch was committed by another ``mirror --every``
    process still running on this host: two mirrors of one store only race each other for the
    writer lease (the loser of a collision stops, whichever it is), so the second is refused
    before it does anything."""
    run = next((b.detail["mirror"].get("run") for b in reversed(snap.batches) if b.detail.get("mirror")), None)
    if not run or not run.get("every") or (run.get("pid"), run.get("start")) == (me["pid"], me["start"]):
        return
    if _runs_on(run):
        raise MirrorError(f"{store.uri} is mirrored by another process (mirror --every {run['every']:g}, pid "
                          f"{run['pid']} on {run['host']}, still running): one mirror a store; nothing was done "
                          "by this one")


def check_broker(broker: BrokerFiles, store: storage.Store, snap: StoreSnapshot, ident: dict, end: int) -> None:
    """MirrorDiverged unless the broker's CommitLog still holds what the mirror committed where
    both hold it: its first record (if still there), the bytes under the mirror's end, and the
    first record of its oldest segment."""
    segs = broker.segments()
    first = f"{commitlog.DIR}/{ident['first_segment']}"
    what = "it is another broker's store or its files were replaced: mirror it into a new store"
    if any(rel == first for _, rel in segs):
        theirs = broker.first_record(first)
        if (theirs or broker.holds(first)) and hashlib.sha256(theirs).hexdigest() != ident["first_record_sha256"]:
            raise MirrorDiverged(f"{broker.root}: the record at CommitLog offset 0 is not the one this mirror "
                                 f"started from: {what}")
    rows = sorted(snap.of_kind(FileKind.COMMITLOG), key=lambda r: r.base_offset)
    if not rows:
        return
    if not segs or segs[0][0] > end:
        lo = segs[0][0] if segs else None
        raise MirrorDiverged(f"{broker.root}: the mirror ends at CommitLog offset {end}, the broker's CommitLog "
                             + (f"now starts at {lo}: its retention deleted records {end}..{lo} the mirror never "
                                "copied (lost to the mirror, which keeps every batch it committed); "
                                + new_mirror(broker) + " (mirror more often than the broker's fileReservedTime)"
                                if lo is not None else "holds no segment: " + what))
    last = rows[-1]
    valid = last.valid_bytes
    lo = max(0, valid - _TAIL_CHECK)
    have = broker.read(last.path, lo, valid - lo)
    if not have and segs[-1][0] > last.base_offset:
        raise MirrorDiverged(f"{broker.root}: the broker has no {last.path} (CommitLog offset "
                             f"{last.base_offset}), where the mirror ends, but older and newer segments: "
                             f"{what}")
    if segs[-1][0] < last.base_offset or len(have) < valid - lo:
        raise MirrorDiverged(f"{broker.root}: the broker's CommitLog ends before offset {end}, where the mirror "
                             "ends (it truncated its tail, e.g. after a power cut): the mirror keeps its batches; "
                             + new_mirror(broker))
    if len(have):
        mine = committed_bytes(store, last, lo, valid - lo)
        if have != mine:
            d = next(i for i in range(len(mine)) if have[i] != mine[i])
            raise MirrorDiverged(f"{broker.root}: CommitLog offset {last.base_offset + lo + d} differs from "
                                 f"what the mirror committed there: {what}")
    oldest_base, oldest_rel = segs[0]
    row = snap.files.get(oldest_rel)
    if 0 < oldest_base < end and row is not None:
        theirs = broker.first_record(oldest_rel)
        if theirs and committed_bytes(store, row, 0, len(theirs)) != theirs:
            raise MirrorDiverged(f"{broker.root}: the record at CommitLog offset {oldest_base} differs from what "
                                 f"the mirror committed there: {what}")


def new_mirror(broker: BrokerFiles) -> str:
    """What an operator can do once a mirror cannot go on: a new mirror starts at the broker's
    first record, at CommitLog offset 0 (``identity``), which a broker past its retention no
    longer holds."""
    segs = broker.segments()
    if segs and segs[0][0] == 0:
        return "start a new mirror (a new store) for what the broker writes from now on"
    return "a new mirror starts at CommitLog offset 0, which the broker deleted: " + ADOPT


ADOPT = ("this broker can no longer be mirrored; adopt a stopped copy of it (rocketlake ingest --from-store) into "
          "a new store to keep what it holds")


def committed_bytes(store: storage.Store, row: dict, pos: int, n: int) -> bytes:
    """Bytes of the committed version of ``row``'s file (object stores: assembled from its extents)."""
    return store.read(reading_path(store, row, set()), pos, n)
