"""The FUSE side: a passthrough file system over the backing directory that reports every
state-changing request to the Recorder. Runs in its own process (``python -m crashfs.passthrough``,
started by ``lazyfs.LazyFS``), serving one request at a time, so the trace is a total order.

Passthrough means the backing directory always holds exactly what processes on the mount see;
reads and writes go to backing fds with os.preadv/os.pwrite straight from/to libfuse's buffers.
Choices that keep real programs working unmodified:

* no writeback cache (explicitly turned off): every write(2) reaches us before it returns, so the
  backing directory is the page cache the model drops at a crash, and an fsync has nothing of the
  kernel's left to flush but mmap'd pages, which the kernel writes to us before it sends FSYNC;
* 1 MiB requests (max_write, max_readahead): Python per request is the cost, not bytes;
* ``hard_remove``: an unlinked open file is really unlinked (no ``.fuse_hidden*`` renames that
  would show in directory listings and fsyncs), its open handles still work (we hold the fds);
* ``use_ino``: hard links show one st_ino, as programs comparing inodes expect;
* renameat2 flags (RENAME_NOREPLACE, RENAME_EXCHANGE) are honoured: mfusepy drops them, so
  ``_CrashFUSE`` passes them on (Rust's std and delta-rs rely on no-replace semantics);
* O_DIRECT is accepted by opening the backing file without it: the kernel does direct I/O to us,
  we do buffered I/O behind it, which is all the model needs.

The control files under ``/.crashfs/`` (not listed in the root) take the test's requests:
writing a label to ``mark`` records a ``mark`` event, writing to ``freeze`` cuts the power now,
writing to ``flush`` writes out a coalesced write event so the trace can be read live.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import os
import signal
import stat
import sys
import time

CONTROL_DIR = "/.crashfs"
CONTROL_FILES = ("mark", "freeze", "flush")
MiB = 1 << 20
FUSE_CAP_WRITEBACK_CACHE = 1 << 16
# flags not passed to the backing open: the kernel already handled them (create, excl), or they
# would break our buffered pwrites (O_DIRECT's alignment, O_APPEND ignoring the kernel's offsets)
_STRIP_FLAGS = os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_APPEND | getattr(os, "O_DIRECT", 0)


def _load_mfusepy():
    """mfusepy binds the first libfuse it finds; this file system needs libfuse3."""
    from .availability import libfuse3_path
    if not os.environ.get("FUSE_LIBRARY_PATH") and libfuse3_path():
        os.environ["FUSE_LIBRARY_PATH"] = libfuse3_path()
    import mfusepy
    return mfusepy


mfusepy = _load_mfusepy()
_libc = ctypes.CDLL(None, use_errno=True)
_libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
AT_FDCWD = -100
_UTIME_NOW, _UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2


def _renameat2(old: str, new: str, flags: int) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def _buffer(ptr, size: int) -> memoryview:
    """libfuse's request buffer as a writable memoryview, without a copy."""
    return memoryview((ctypes.c_char * size).from_address(ctypes.cast(ptr, ctypes.c_void_p).value)).cast("B")


class _Handle:
    __slots__ = ("fd", "ino", "path")

    def __init__(self, fd: int, ino: int, path: str):
        self.fd, self.ino, self.path = fd, ino, path


class _CrashFUSE(mfusepy.FUSE):
    """mfusepy's FUSE with the few callbacks it does not pass on as we need them."""

    def read(self, path, buf, size, offset, fip):
        return self.operations.read_into(fip.contents.fh, _buffer(buf, size), offset)

    def write(self, path, buf, size, offset, fip):
        return self.operations.write_from(fip.contents.fh, _buffer(buf, size), offset)

    def rename_fuse_3(self, old, new, flags):
        return self.operations.rename(old.decode(self.encoding, self.errors),
                                      new.decode(self.encoding, self.errors), flags)

    def utimens_fuse_3(self, path, buf, fip):
        # raw timespecs: UTIME_NOW / UTIME_OMIT do not survive mfusepy's conversion to nanoseconds
        times = None
        if buf:
            ts = ctypes.cast(buf, ctypes.POINTER(mfusepy.c_timespec * 2)).contents
            times = tuple((t.tv_sec, t.tv_nsec) for t in ts)
        return self.operations.utimens(None if path is None else path.decode(self.encoding, self.errors),
                                       times)

    def truncate_fuse_3(self, path, length, fip):
        fh = fip.contents.fh if fip else None
        return self.operations.truncate(None if path is None else path.decode(self.encoding, self.errors),
                                        length, fh)


class CrashOps(mfusepy.Operations):
    """The callbacks: each does the operation on the backing directory, then tells the Recorder."""

    use_ns = True

    def __init__(self, recorder):
        self.rec = recorder
        self._handles: dict[int, _Handle] = {}
        self._next_fh = 16
        self._dir_handles: dict[int, str] = {}

    # ------------------------------------------------------------------ helpers
    def _b(self, path: str) -> str:
        return self.rec.backing_path(path)

    def _gate(self) -> None:
        """Refuse everything after the freeze point (callers let the control files through)."""
        self.rec.check()

    def _new_fh(self, handle: _Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = handle
        return fh

    @staticmethod
    def _control(path: str | None) -> str | None:
        """The control file's name if path is one, '' for the control directory itself."""
        if path is None or not (path == CONTROL_DIR or path.startswith(CONTROL_DIR + "/")):
            return None
        name = path[len(CONTROL_DIR) + 1:]
        if name and name not in CONTROL_FILES:
            raise mfusepy.FuseOSError(errno.ENOENT)
        return name

    # ------------------------------------------------------------------ lifecycle
    def init_with_config(self, conn, config):
        if conn is not None:
            conn.max_write = MiB
            conn.max_readahead = MiB
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE
        if config is not None:
            config.use_ino = 1
            config.hard_remove = 1

    def destroy(self, path):
        for h in self._handles.values():
            if h.fd >= 0:
                os.close(h.fd)
        self.rec.close()

    # ------------------------------------------------------------------ attributes, listing
    def getattr(self, path, fh=None):
        ctl = self._control(path)
        if ctl == "":
            return {"st_mode": 0o40755, "st_nlink": 2, "st_ino": 1}
        if ctl:
            return {"st_mode": 0o100666, "st_nlink": 1, "st_size": 0, "st_ino": 2 + CONTROL_FILES.index(ctl)}
        if path != "/":
            self._gate()
        h = self._handles.get(fh) if fh is not None else None
        st = os.fstat(h.fd) if h is not None else os.lstat(self._b(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                                            "st_blocks", "st_blksize", "st_rdev")} | {
            "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def access(self, path, amode):
        if self._control(path) is not None:
            return 0
        self._gate()
        if not os.access(self._b(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def readlink(self, path):
        self._gate()
        return os.readlink(self._b(path))

    def statfs(self, path):
        sv = os.statvfs(self.rec.backing)
        return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                            "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def opendir(self, path):
        if self._control(path) is None:
            self._gate()
            if not os.path.isdir(self._b(path)):
                raise mfusepy.FuseOSError(errno.ENOTDIR)
        fh = self._next_fh
        self._next_fh += 1
        self._dir_handles[fh] = path
        return fh

    def readdir(self, path, fh):
        # With use_ino the kernel takes d_ino from here, and readdir(3) skips entries whose d_ino
        # is 0: every entry needs its inode number (and its type, for d_type).
        if self._control(path) == "":
            return [(".", {"st_ino": 1, "st_mode": 0o40755}, 0), ("..", {"st_ino": 1, "st_mode": 0o40755}, 0),
                    *((n, {"st_ino": 2 + i, "st_mode": 0o100666}, 0) for i, n in enumerate(CONTROL_FILES))]
        self._gate()
        bpath = self._b(path)
        st = os.lstat(bpath)
        out = [(".", {"st_ino": st.st_ino, "st_mode": st.st_mode}, 0),
               ("..", {"st_ino": 1, "st_mode": stat.S_IFDIR}, 0)]
        with os.scandir(bpath) as it:
            for de in it:
                mode = stat.S_IFDIR if de.is_dir(follow_symlinks=False) else \
                    stat.S_IFLNK if de.is_symlink() else stat.S_IFREG
                out.append((de.name, {"st_ino": de.inode(), "st_mode": mode}, 0))
        return out

    def releasedir(self, path, fh):
        self._dir_handles.pop(fh, None)
        return 0

    def fsyncdir(self, path, datasync, fh):
        if self._control(path) is not None:
            return 0
        self._gate()
        self.rec.fsync_dir(path if path is not None else self._dir_handles[fh])
        return 0

    # ------------------------------------------------------------------ namespace
    def mkdir(self, path, mode):
        self._gate()
        os.mkdir(self._b(path), mode)
        self.rec.new_inode(path)
        self.rec.record("mkdir", path)
        return 0

    def rmdir(self, path):
        self._gate()
        os.rmdir(self._b(path))
        self.rec.record("rmdir", path)
        return 0

    def unlink(self, path):
        self._gate()
        ino = self.rec.id_of_path(path)
        os.unlink(self._b(path))
        self.rec.record("unlink", path, ino=ino)
        return 0

    def symlink(self, target, source):
        # mfusepy's names: target is the new link's path, source what it points to
        self._gate()
        os.symlink(source, self._b(target))
        self.rec.new_inode(target)
        self.rec.record("symlink", target, target=source)
        return 0

    def link(self, target, source):
        # target: the new name; source: the existing file
        self._gate()
        os.link(self._b(source), self._b(target))
        self.rec.record("link", source, target, ino=self.rec.id_of_path(target))
        return 0

    def rename(self, old, new, flags=0):
        self._gate()
        if self._control(old) is not None or self._control(new) is not None:
            raise mfusepy.FuseOSError(errno.EPERM)
        ino = self.rec.id_of_path(old)
        if flags:
            _renameat2(self._b(old), self._b(new), flags)
        else:
            os.rename(self._b(old), self._b(new))
        self.rec.record("rename", old, new, ino=ino, flags=flags)
        return 0

    def mknod(self, path, mode, dev):
        self._gate()
        os.mknod(self._b(path), mode, dev)
        self.rec.new_inode(path)
        self.rec.record("create", path, ino=self.rec.id_of_path(path))
        return 0

    # ------------------------------------------------------------------ metadata (not modelled)
    def chmod(self, path, mode):
        if self._control(path) is not None:
            return 0
        self._gate()
        os.chmod(self._b(path), mode)
        return 0

    def chown(self, path, uid, gid):
        self._gate()
        os.chown(self._b(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path, times=None):
        if self._control(path) is not None:
            return 0
        self._gate()
        if times is None:
            os.utime(self._b(path), follow_symlinks=False)
            return 0
        st = os.lstat(self._b(path))
        now = time.time_ns()
        ns = []
        for (sec, nsec), old in zip(times, (st.st_atime_ns, st.st_mtime_ns)):
            ns.append(now if nsec == _UTIME_NOW else old if nsec == _UTIME_OMIT else sec * 10**9 + nsec)
        os.utime(self._b(path), ns=tuple(ns), follow_symlinks=False)
        return 0

    # ------------------------------------------------------------------ open files
    def create(self, path, mode, flags):
        self._gate()
        if self._control(path) is not None:
            raise mfusepy.FuseOSError(errno.EEXIST)
        bpath = self._b(path)
        existed = os.path.lexists(bpath)
        fd = os.open(bpath, self._backing_flags(flags) | os.O_CREAT | (flags & os.O_EXCL), mode)
        if existed:
            ino = self.rec.id_of(os.fstat(fd))
            if flags & os.O_TRUNC:
                self._truncated(path, ino)
        else:
            ino = self.rec.new_inode(path)
            self.rec.record("create", path, ino=ino)
        return self._new_fh(_Handle(fd, ino, path))

    def open(self, path, flags):
        ctl = self._control(path)
        if ctl is not None:
            if ctl == "":
                raise mfusepy.FuseOSError(errno.EISDIR)
            return self._new_fh(_Handle(-1, 0, path))
        self._gate()
        fd = os.open(self._b(path), self._backing_flags(flags))
        ino = self.rec.id_of(os.fstat(fd))
        if flags & os.O_TRUNC:          # atomic O_TRUNC: the truncate comes with the open
            self._truncated(path, ino)
        return self._new_fh(_Handle(fd, ino, path))

    @staticmethod
    def _backing_flags(flags: int) -> int:
        flags &= ~_STRIP_FLAGS
        if flags & os.O_ACCMODE == os.O_WRONLY:
            # the kernel may write mmap'd pages or read through any handle of the inode
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        return flags | os.O_CLOEXEC

    def _truncated(self, path, ino, length=0):
        self.rec.changed(ino)
        self.rec.record("truncate", path, ino=ino, length=length)

    # read and write are served by read_into and write_from (_CrashFUSE hands them libfuse's
    # buffer); defined so that mfusepy registers the callbacks.
    def read(self, path, size, offset, fh):
        raise mfusepy.FuseOSError(errno.ENOSYS)

    def write(self, path, data, offset, fh):
        raise mfusepy.FuseOSError(errno.ENOSYS)

    def read_into(self, fh, buf: memoryview, offset: int) -> int:
        h = self._handles[fh]
        if h.fd < 0:
            return 0
        self._gate()
        return os.preadv(h.fd, [buf], offset)

    def write_from(self, fh, buf: memoryview, offset: int) -> int:
        h = self._handles[fh]
        if h.fd < 0:
            return self._control_write(h.path, bytes(buf))
        self._gate()
        n = os.pwrite(h.fd, buf, offset)
        self.rec.wrote(fh, h.ino, h.path, offset, buf[:n])
        return n

    def _control_write(self, path: str, data: bytes) -> int:
        name = self._control(path)
        if name == "mark":
            self._gate()
            self.rec.record("mark", label=data.decode("utf-8", "replace").strip())
        elif name == "freeze":
            if not self.rec.frozen:
                self.rec.freeze()
        elif name == "flush":
            self.rec.flush()
        return len(data)

    def truncate(self, path, length, fh=None):
        if self._control(path) is not None:
            return 0
        self._gate()
        h = self._handles.get(fh) if fh is not None else None
        if h is not None:
            os.ftruncate(h.fd, length)
            ino, path = h.ino, path or h.path
        else:
            os.truncate(self._b(path), length)
            ino = self.rec.id_of_path(path)
        self._truncated(path, ino, length)
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        self._gate()
        h = self._handles[fh]
        if mode != 0:
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)   # punch/collapse: nothing here uses them
        os.posix_fallocate(h.fd, offset, size)
        self.rec.changed(h.ino)
        self.rec.record("fallocate", path or h.path, ino=h.ino, offset=offset, length=size)
        return 0

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        h = self._handles[fh]
        if h.fd < 0:
            return 0
        self._gate()
        self.rec.fsync_file(path or h.path, h.ino, h.fd, bool(datasync))
        return 0

    def release(self, path, fh):
        h = self._handles.pop(fh, None)
        if h is not None and h.fd >= 0:
            os.close(h.fd)
            self.rec.closed(fh)
        return 0


def _die_with(parent: int) -> None:
    """SIGTERM us when the test process dies: libfuse then leaves its loop and unmounts, so no
    mount outlives a killed pytest. (The signal follows the thread that started us: a mount
    started from a thread that ends before the unmount would stop with it.)"""
    _libc.prctl(1, signal.SIGTERM)          # PR_SET_PDEATHSIG
    if os.getppid() != parent:              # it died before the prctl
        sys.exit(1)


def main(argv=None) -> None:
    from .recorder import Recorder
    p = argparse.ArgumentParser(description="crashfs: the crash simulator's FUSE process")
    p.add_argument("backing")
    p.add_argument("mountpoint")
    p.add_argument("state_dir")
    p.add_argument("--freeze-after", type=int)
    p.add_argument("--record-writes", action="store_true")
    p.add_argument("--parent", type=int, help="exit (unmounting) when this process dies")
    a = p.parse_args(argv)
    if a.parent:
        _die_with(a.parent)
    rec = Recorder(os.path.abspath(a.backing), a.state_dir, freeze_after=a.freeze_after,
                   record_writes=a.record_writes)
    # Written once the mount state is recorded: the parent waits for the mount itself.
    _CrashFUSE(CrashOps(rec), a.mountpoint, foreground=True, nothreads=True,
               fsname="crashfs", subtype="crashfs")
    sys.exit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
