"""The broker lock: the ``fcntl`` lock a running RocketMQ broker holds on ``<storePathRootDir>/lock``.

RocketMQ's ``DefaultMessageStore`` opens ``lock`` (``RandomAccessFile "rw"``: it makes the file
when there is none, and minds none that is there, empty or not) and in ``start()`` takes
``FileChannel.tryLock(0, 1, false)``, an exclusive ``fcntl`` lock on its first byte; a broker
that cannot take it throws ("Lock failed, MQ already started") and does not start. (Its
``load()``, the recovery included, runs before ``start()``: a broker started on a store being
written reads it before it gives up; the lock keeps it from running there.) Once started it
writes ``lock`` (4 bytes) into the file.

Every process that writes a local store's directory holds the lock for its whole run, taken
before it writes anything; ``BrokerRunning`` (exit 3) when another process holds it in a mode
that excludes this one, nothing changed:

* **exclusive**: a process changing a broker's directory in place, as a broker does: a repair
  (``ops.repair``), an in-place adopt (``ops.adopt``). It excludes every other holder.
* **shared**: a holder of the writer lease (``table.writerlease``: ingest, expire, adopt, repair,
  the mirror's target, the streaming sink's commits). A broker, a repair or an in-place adopt
  is excluded; rocketlake's writers do not exclude each other here (the writer lease orders
  them, and takes a stalled writer's store over).

A directory without ``lock`` gets one (``create``), made exclusively, and keeps it: no holder
ever removes ``lock`` (but ``remove_made_dir``, with the directory a refused first run made). A
broker opens the file in its constructor and locks it only in
``start()``, after ``load()`` (its recovery: seconds on a large store); a writer that removed the
file meanwhile (it made it, or found it empty) would leave that broker locking a file no longer
in the directory, and the next writer, making a new ``lock``, would lock that one and write under
the running broker. RocketMQ's own store keeps ``lock`` for good too (a broker never removes it);
an empty one is what a writer (or a broker that never started) leaves. A holder that finds the
file it locked removed or replaced meanwhile (by hand) tries again, so two processes never hold
locks on two different files of one name. ``lock`` must be a regular file in the directory: a
symbolic link (which could lead out of the store) or anything else is refused
(``StorePathError``), nothing opened through it.

The lock is POSIX's: per process, it excludes other processes only, and closing any fd of the
file drops all of the process's locks on it. So a process holds one fd per directory whatever
the number of its holds (a repair's, then its writer lease's), counted: the last release closes
it, and the lock is in the strongest mode a hold still asks for. A forked child holds none of
its parent's locks: its first hold opens an fd of its own, and ending a hold it inherited does
nothing.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from dataclasses import dataclass

from ..errors import BrokerRunning, StorePathError
from ..format import paths
from . import storage

__all__ = ["BrokerLock", "hold_broker_lock", "remove_made_dir"]


@dataclass
class _Held:
    """This process's lock on one directory's ``lock``: the one fd, the process that holds it (a
    forked child has a copy of it, not the lock), the holds of each mode, the mode the lock is in."""
    fd: int
    path: str
    pid: int
    exclusive: int = 0
    shared: int = 0
    locked_exclusive: bool = False


_HELD: dict[tuple[int, int], _Held] = {}       # (st_dev, st_ino) of the store's directory -> its lock
_GUARD = threading.Lock()


class BrokerLock:
    """One hold of a directory's broker lock (``hold_broker_lock``); ``release`` ends it."""

    def __init__(self, key: tuple[int, int], held: _Held, exclusive: bool):
        self._key, self._held, self.exclusive = key, held, exclusive
        self._released = False

    @property
    def path(self) -> str:
        return self._held.path

    def release(self) -> None:
        """End this hold (a second call does nothing). The last hold of the process closes the fd,
        which drops the lock (the file stays: see the module docstring); an exclusive hold ended
        beside shared ones leaves the lock shared. In a forked child a parent's hold ends as
        nothing: the lock is the parent's, and converting or testing it here would act as the
        child's own (a conversion to shared would wait for the parent's exclusive lock for ever)."""
        with _GUARD:
            if self._released:
                return
            self._released = True
            h = self._held
            if h.pid != os.getpid():
                return
            if self.exclusive:
                h.exclusive -= 1
            else:
                h.shared -= 1
            if h.exclusive or h.shared:
                if not h.exclusive and h.locked_exclusive:
                    fcntl.lockf(h.fd, fcntl.LOCK_SH)       # a conversion: never waits, never lets go
                    h.locked_exclusive = False
                return
            if _HELD.get(self._key) is h:
                del _HELD[self._key]
            os.close(h.fd)


def hold_broker_lock(store: storage.Store, create: bool = False, shared: bool = False) -> BrokerLock | None:
    """The broker lock of a local store's directory, held (exclusive, or ``shared``); None: not a
    local store, no such directory, no ``lock`` and not ``create``, or a directory this process
    cannot write. ``BrokerRunning`` when another process holds it in a mode that excludes this
    one. Holds within one process share its lock (and its fd): see the module docstring."""
    if not store.local or not os.path.isdir(store.root):
        return None
    st = os.stat(store.root)
    key = (st.st_dev, st.st_ino)
    with _GUARD:
        h = _HELD.get(key)
        if h is not None and h.pid != os.getpid():
            del _HELD[key]                  # a parent's, copied by fork: its lock is not this process's
            os.close(h.fd)
            h = None
        if h is None:
            path = os.path.join(store.root, paths.LOCK_FILE)
            fd = _lock(path, create, shared)
            if fd is None:
                return None
            h = _HELD[key] = _Held(fd, path, os.getpid(), locked_exclusive=not shared)
        elif not shared and not h.locked_exclusive:
            try:
                fcntl.lockf(h.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)      # failing, it stays shared
            except OSError:
                raise _running(h.path) from None
            h.locked_exclusive = True
        if shared:
            h.shared += 1
        else:
            h.exclusive += 1
        return BrokerLock(key, h, not shared)


def remove_made_dir(root: str) -> bool:
    """Remove the directory ``root`` that a refused or empty first run made, if it holds nothing
    or nothing but an empty ``lock`` (its writers' hold): whether it is gone. A refused first batch
    leaves no directory, as before its writers held the lock; anything else there, or a directory
    that cannot be removed, stays and is no error (this is the cleanup after a run that already
    failed or did nothing: the run's own outcome is what it reports). The ``lock`` goes only
    while no process holds it, this one included (closing a second fd would drop this process's
    own lock), and nothing else is there: a broker makes its ``commitlog`` and ``consumequeue``
    before it opens ``lock`` (``DefaultMessageStore``), so a directory holding ``lock`` alone has
    no broker that could lock it after it is gone."""
    try:
        _remove_made_dir(root)
    except OSError:
        return False
    return True


def _remove_made_dir(root: str) -> None:
    """``remove_made_dir``; OSError, everything left, where it must stay."""
    path = os.path.join(root, paths.LOCK_FILE)
    if os.listdir(root) == [paths.LOCK_FILE]:
        st = os.stat(root)
        with _GUARD:
            h = _HELD.get((st.st_dev, st.st_ino))
            if h is not None and h.pid == os.getpid():
                raise OSError(errno.EBUSY, f"{path}: held by this process")
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)    # ELOOP: a link stays
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstat(fd).st_size:
                raise OSError(errno.ENOTEMPTY, f"{path}: not an empty lock file")
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)                # OSError: another process holds it
            if _same_file(fd, path) and os.listdir(root) == [paths.LOCK_FILE]:
                os.unlink(path)
        finally:
            os.close(fd)
    os.rmdir(root)


def _lock(path: str, create: bool, shared: bool) -> int | None:
    """An fd of ``path`` locked in the mode asked, None when there is no file to lock."""
    while True:
        fd = _open(path, create)
        if fd is None:
            return None
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _running(path) from None
        if _same_file(fd, path):
            return fd
        os.close(fd)         # removed or replaced meanwhile: lock the one there now


def _running(path: str) -> BrokerRunning:
    return BrokerRunning(f"{path} is locked by another process (a running broker, or a rocketlake repair, adopt, "
                         "ingest, expire or mirror of this directory): stop it first; nothing was changed")


def _open(path: str, create: bool) -> int | None:
    """An fd of the regular file ``path``, made exclusively when there is none and ``create``
    (None: there is none, and it is not to be or cannot be made)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            except FileExistsError:
                continue
            except OSError as e:
                if e.errno in (errno.EROFS, errno.EACCES):
                    return None          # a directory this process cannot write: it changes nothing there
                raise
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
            raise StorePathError(_not_a_file(path, e.strerror)) from None
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        raise StorePathError(_not_a_file(path, "not a regular file"))


def _not_a_file(path: str, why: str) -> str:
    return (f"{path} is not a regular file ({why}): the broker lock cannot be held on it (a link could lead "
            "out of the store); nothing was changed")


def _same_file(fd: int, path: str) -> bool:
    """Is ``path`` still the file open as ``fd``?"""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
