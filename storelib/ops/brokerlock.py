"""The broker lock: the ``fcntl`` lock a running RocketMQ broker holds on ``<storePathRootDir>/lock``
(``FileChannel.tryLock``). Every process that changes a broker's directory in place holds it for
its whole run: a running broker, a repair (``ops.repair``), an in-place adopt (``ops.adopt``). The
lock is per process (POSIX): it excludes other processes only.

A broker's directory without a ``lock`` (a broker creates it when it starts; a copy may lack it)
gets one (``create``), made exclusively and removed again when released, so that a run leaves the
directory as it found it (a killed run leaves it, empty, as a broker does). A rocketlake store's
writers exclude each other by its writer lease; there it is held only when a broker made it. A holder that finds the file it locked removed or replaced meanwhile (its creator
released it) tries again, so two processes never hold locks on two different files of one name.
``lock`` must be a regular file in the directory: a symbolic link (which could lead out of the
store) or anything else is refused (``StorePathError``), nothing opened through it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from ..errors import BrokerRunning, StorePathError
from ..format import paths
from ..io import storage

__all__ = ["BrokerLock", "hold_broker_lock"]


@dataclass(frozen=True)
class BrokerLock:
    """A held broker lock: its fd, the file's path, whether this process created the file."""
    fd: int
    path: str
    created: bool

    def release(self) -> None:
        """Remove the file this process created (still holding its lock, so nobody else holds one
        on it), then close the fd, which drops the lock."""
        try:
            if self.created and _same_file(self.fd, self.path):
                os.unlink(self.path)
        finally:
            os.close(self.fd)


def hold_broker_lock(store: storage.Store, create: bool = False) -> BrokerLock | None:
    """The broker lock of a local store's directory, held (None: not a local store, no such
    directory, no ``lock`` and not ``create``, or a directory this process cannot write);
    ``BrokerRunning`` when another process holds it."""
    if not store.local or not os.path.isdir(store.root):
        return None
    path = os.path.join(store.root, paths.LOCK_FILE)
    while True:
        opened = _open(path, create)
        if opened is None:
            return None
        fd, created = opened
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise BrokerRunning(f"{path} is locked by another process (a running broker, or a repair or adopt of "
                                "this directory): stop it first; nothing was changed") from None
        if _same_file(fd, path):
            return BrokerLock(fd, path, created)
        os.close(fd)         # its creator removed it when it released it: lock the one there now


def _open(path: str, create: bool) -> tuple[int, bool] | None:
    """(fd, created) of the regular file ``path``, made exclusively when there is none and
    ``create`` (None: there is none, and it is not to be or cannot be made)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
            created = False
        except FileNotFoundError:
            if not create:
                return None
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                created = True
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
            return fd, created
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
