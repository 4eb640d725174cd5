"""Reads of a local store without pyarrow: the shell lookup path's ``Store``.

``python jobs/query.py key ...`` pays for every module it imports: pyarrow alone costs more than
the whole lookup (about 0.15-0.3 s of a 0.3 s budget on these machines). ``LocalStore`` serves the
few calls a single lookup makes on a local store (``read``, ``size``, ``exists``, ``list_dirs``,
``path``) with plain ``os`` calls, and hands everything else to a ``storage.Store`` over the same
root, created on first use (``full``): listings with symlink checks, writes, errors. That
``storage.Store`` shares ``moved`` (staged -> final names of a publish in flight), so a read that
fails here is retried there with the same rules.

Path containment is never weaker than ``storage.Store.path``: ``path`` accepts only a strict
subset on its own (components of ``[A-Za-z0-9_%|=+.-]``, none of them ``.``/``..``/empty, not
absolute, whose real path stays under the real store root and is no FIFO or device:
``paths.local_target_problem``); anything else is decided, and
refused with its ``StorePathError``, by ``storage.Store.path``.
"""
from __future__ import annotations

import os
import re
import stat

from typing import TYPE_CHECKING, Any

from ..format.paths import is_local, local_path, local_target_problem
from .protocol import Capabilities

if TYPE_CHECKING:                       # (storage loads pyarrow: not on the shell lookup path)
    from .storage import Store

__all__ = ["LocalStore", "open_local", "is_plain_path"]

# A store-relative path made of plain names only: what storage.Store.path accepts without doubt
# (names.rel_path_problem also allows other characters; those go to it).
_PLAIN = re.compile(r"(?:(?!\.\.?(?:/|$))[A-Za-z0-9_%|=+.\-]+/)*(?!\.\.?$)[A-Za-z0-9_%|=+.\-]+", re.ASCII)


def is_plain_path(rel: object) -> bool:
    """``rel`` is a store-relative path of plain names (a strict subset of what
    ``storage.Store.path`` accepts lexically; symlinks are checked when it is used)."""
    return isinstance(rel, str) and _PLAIN.fullmatch(rel) is not None


def open_local(uri: object) -> LocalStore | None:
    """A ``LocalStore`` for a local path or file:// URI; None for anything else (a ``Store``
    object, s3://, ...: the caller uses ``storage.Store``)."""
    if isinstance(uri, str) and is_local(uri):
        return LocalStore(uri)
    return None


class LocalStore(Capabilities):
    """The read side of ``storage.Store`` for a local store root (see the module doc); a
    ``protocol.Store``."""

    local = True

    def __init__(self, uri: str):
        self.uri = uri.rstrip("/") if uri != "/" else uri
        self.root = os.path.abspath(local_path(self.uri))
        self.moved: dict[str, str] = {}
        self._paths: dict[str, str] = {}
        self._real_root: str | None = None
        self._full: Store | None = None

    # -- the storage.Store behind everything not served here
    @property
    def full(self) -> Store:
        """The ``storage.Store`` over the same root (imports pyarrow: first use only)."""
        if self._full is None:
            from .storage import Store as FullStore
            self._full = FullStore(self.uri)
            self._full.moved = self.moved            # one view of a publish in flight
        return self._full

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_full", "_paths", "_real_root", "moved"):
            raise AttributeError(name)
        return getattr(self.full, name)

    def _mapped(self, rel: str) -> bool:
        """Whether the full store reads ``rel`` some other way (a file assembled from objects)."""
        return self._full is not None and rel in getattr(self._full, "assembled", {})

    def reads_in_place(self, rel: str) -> bool:
        return not self._mapped(rel)

    # -- paths
    def path(self, rel: str) -> str:
        if not rel:
            return self.root
        p = self._paths.get(rel)
        if p is not None:
            return p
        if not is_plain_path(rel):
            return self.full.path(rel)               # decides, and raises StorePathError
        p = self.root + "/" + rel
        root = self._real_root
        if root is None:
            root = self._real_root = os.path.realpath(self.root)
        if local_target_problem(root, p):
            return self.full.path(rel)               # a symlink out of the store, a FIFO: refused there
        self._paths[rel] = p
        return p

    # -- queries
    def exists(self, rel: str) -> bool:
        if self._mapped(rel):
            return self.full.exists(rel)
        return os.path.exists(self.path(rel))

    def size(self, rel: str) -> int | None:
        if self._mapped(rel):
            return self.full.size(rel)
        try:
            st = os.stat(self.path(rel))
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return self.full.size(rel)
        return st.st_size

    def list_dirs(self, rel: str) -> list[str]:
        """Subdirectory names of ``rel``; any symlink met goes to ``storage.Store``'s checks."""
        base = self.path(rel)
        try:
            with os.scandir(base) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return []
        if any(e.is_symlink() for e in entries):
            return self.full.list_dirs(rel)
        return sorted(e.name for e in entries if e.is_dir())

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        if self._mapped(rel):
            return self.full.read(rel, offset, length)
        try:
            fd = os.open(self.path(rel), os.O_RDONLY)
            try:
                if length is None:
                    length = max(0, os.fstat(fd).st_size - offset)
                data = os.pread(fd, length, offset)
                if len(data) < length:               # pread may return less: read on (like fh.read)
                    parts = [data]
                    got = len(data)
                    while got < length:
                        more = os.pread(fd, length - got, offset + got)
                        if not more:
                            break
                        parts.append(more)
                        got += len(more)
                    data = b"".join(parts)
                return data
            finally:
                os.close(fd)
        except OSError:
            if not self.moved:
                raise
            return self.full.read(rel, offset, length)   # published meanwhile: storage.Store follows it
