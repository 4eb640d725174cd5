"""The objects a manifest row names, on object stores: the one reading of that.

A file version's bytes live in immutable objects under ``_rocketlake/objects/`` (docs/FORMAT.md
§11.8). Its row names them: every object path its ``detail`` holds (inline extents, a paged head's
layers: storelib.io.headpages), its extent-list objects, and the extents those list, read and
checked (sha256, file, range, count) by their one reader, ``storelib.io.extentlists``. An
expiry deletes what the rows of the files it removes name (``storelib.table.staged_deletes``);
the sweep keeps what any retained row names (``storelib.table.objsweep``). Both ask here.

What cannot be read decides by who asks. ``strict`` (the sweep: an object not named is deleted)
refuses (``CorruptStore``, or ``StoreError`` for a list object that is there and could not be
read) a detail that does not parse, lists of the wrong shape, a list object that is damaged, and a
missing one of a ``live`` row; a missing list object of a row that is not live names itself and
the row's other objects (an expiry deleted it with its file, and what it listed went with it).
Otherwise (an expiry's deletes: a name is deleted) a damaged row names nothing, and a list object
that cannot be read names itself alone: what it lists stays behind (the sweep's, once no retained
row names it); of a ``live`` row, ``CorruptStore``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import CorruptStore, StoreError
from ..format import paths
from ..io import extentlists, headpages, storage
from .rows import ManifestRow

__all__ = ["Named", "objects_named"]

_PREFIX = paths.OBJECTS_DIR + "/"
_CHUNK = 256                    # rows whose list objects are read together (well within extentlists' cache)


def _strings(value: Any) -> Iterable[str]:
    """Every string anywhere in a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class Named:
    """The objects a set of rows names: ``add`` rows (``live``: the latest snapshot's), then
    ``names``. List objects are read ``threads`` at a time, each once per ``Named`` (``strict``:
    read afresh from the store, never served from what this process read earlier)."""

    def __init__(self, store: storage.Store, strict: bool = False, threads: int = 16):
        self.store, self.strict, self.threads = store, strict, threads
        self.names: set[str] = set()
        self._read: set[tuple[str, str]] = set()          # (list object, file) read by this Named

    def add(self, rows: Iterable[ManifestRow], live: bool = False) -> None:
        chunk: list[ManifestRow] = []
        for r in rows:
            chunk.append(r)
            if len(chunk) >= _CHUNK:
                self._add(chunk, live)
                chunk = []
        if chunk:
            self._add(chunk, live)

    def _add(self, rows: list[ManifestRow], live: bool) -> None:
        parsed = [(r, d) for r in rows if (d := self._detail(r)) is not None]
        todo = []
        for r, d in parsed:
            for lst in self._lists(r, d):
                if (lst.object_rel, r.path) not in self._read:
                    self._read.add((lst.object_rel, r.path))
                    todo.append((r.path, {"extent_lists": extentlists.lists_to_detail([lst])}))
        extentlists.prefetch(todo, extentlists.fetcher(self.store), self.threads, fresh=self.strict)
        for r, d in parsed:
            self._row(r, d, live)

    def _detail(self, r: ManifestRow) -> dict[str, Any] | None:
        """The row's parsed detail when it may name objects (None: it names none)."""
        if paths.OBJECTS_DIR not in r.detail_text:
            return None
        try:
            d = r.detail
        except ValueError:
            if self.strict:
                raise CorruptStore(r.path, 0, "its row's detail is not JSON: what it names is unknown, so "
                                              "nothing is deleted") from None
            return None
        return dict(d) if isinstance(d, dict) else None

    def _lists(self, r: ManifestRow, d: Mapping[str, Any]) -> list[extentlists.ExtentList]:
        try:
            return extentlists.lists_from_detail(d.get("extent_lists"))
        except ValueError as e:
            if self.strict:
                raise CorruptStore(r.path, 0, f"its extent lists: {e}; nothing is deleted") from None
            return []

    def _row(self, r: ManifestRow, d: dict[str, Any], live: bool) -> None:
        lists = self._lists(r, d)
        out = {s for s in _strings(d) if s.startswith(_PREFIX)} if self.strict or "extents" in d else set()
        out.update(x.object_rel for x in lists)
        if "extents" in d:
            try:
                out.update(e.object_rel for e in headpages.version_extents(d, r.path, extentlists.fetcher(self.store)))
            except (ValueError, KeyError, TypeError) as e:
                self._unreadable(r, lists, live, str(e))
                try:
                    out.update(e.object_rel for e in headpages.version_extents(
                        {k: v for k, v in d.items() if k != "extent_lists"}))
                except (ValueError, KeyError, TypeError) as e2:
                    if self.strict:
                        raise CorruptStore(r.path, 0, f"its extents: {e2}; nothing is deleted") from None
                    return                  # a damaged row names nothing: nothing is deleted by it
        self.names.update(out)

    def list_objects(self, rows: Iterable[ManifestRow]) -> dict[str, str]:
        """(extent-list object -> the file of a row naming it) of the lists ``rows`` name where
        ``add`` resolves them (rows with extents; its ``live`` check of a missing one is of these),
        none of them read; a detail or lists that do not parse: as ``add``."""
        out: dict[str, str] = {}
        for r in rows:
            d = self._detail(r)
            if d is not None and "extents" in d:
                for lst in self._lists(r, d):
                    out.setdefault(lst.object_rel, r.path)
        return out

    def _unreadable(self, r: ManifestRow, lists: list[extentlists.ExtentList], live: bool, why: str) -> None:
        """Refuse, when it must, a row whose extents could not be read (``why``)."""
        if not lists:
            return                          # (a damaged head or extents: the read without lists decides)
        gone = [x.object_rel for x in lists if not self.store.exists(x.object_rel)]
        if gone:
            if live:
                raise CorruptStore(r.path, 0, f"its extent list object {gone[0]} is missing; nothing is deleted")
            return                          # (an expiry deleted it with its file)
        if self.strict and "cannot be read" in why:
            raise StoreError(f"{r.path}: {why}; nothing is deleted")
        if self.strict or live:
            raise CorruptStore(r.path, 0, f"its extent lists: {why}; nothing is deleted")

def objects_named(store: storage.Store, rows: Iterable[ManifestRow], live: bool = False,
                  strict: bool = False) -> set[str]:
    """The objects ``rows`` name (``Named``: ``live``, ``strict`` as it says)."""
    named = Named(store, strict)
    named.add(rows, live)
    return named.names
