"""What every store object offers a reader: ``Store`` (a ``typing.Protocol``), implemented by
``storage.Store`` (any file system) and ``localstore.LocalStore`` (a local root, without pyarrow).

The capabilities callers may rely on by name follow from locality alone, so both take them from
``Capabilities`` instead of each stating them: a local directory has ``os_paths`` and
``atomic_rename``, an object store ``objects``. Stdlib only (the shell lookup path imports it).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Store", "Capabilities"]


class Capabilities:
    """The capability flags of a store object, from its ``local``."""

    local: bool

    @property
    def os_paths(self) -> bool:
        """Files are reached with the OS's own calls (open, mmap, stat, rmdir) at ``path(rel)``."""
        return self.local

    @property
    def atomic_rename(self) -> bool:
        """A rename and an exclusive create are atomic: a file is built aside, then moved into place."""
        return self.local

    @property
    def objects(self) -> bool:
        """Files are immutable objects: a new version of a file is new objects (storelib.io.fragments),
        and what a batch wrote is found by its object prefix."""
        return not self.local


@runtime_checkable
class Store(Protocol):
    """A store root's files as a reader reaches them (``storage.Store`` has the writes too)."""

    uri: str
    local: bool
    moved: dict[str, str]  # staged rel -> final rel of files a publish in flight moves

    @property
    def os_paths(self) -> bool: ...

    @property
    def atomic_rename(self) -> bool: ...

    @property
    def objects(self) -> bool: ...

    def path(self, rel: str) -> str:
        """The file system path of ``rel`` (StorePathError if it leads out of the store)."""
        ...

    def exists(self, rel: str) -> bool: ...

    def size(self, rel: str) -> int | None: ...

    def list_dirs(self, rel: str) -> list[str]: ...

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes: ...

    def reads_in_place(self, rel: str) -> bool:
        """Whether ``rel`` is read with the OS's own calls at ``path(rel)`` (a local file that is
        not read some other way: assembled from objects, or through a patch not yet applied)."""
        ...
