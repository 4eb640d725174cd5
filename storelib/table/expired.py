"""What a reader of an older batch is told of a file of that batch that a later expiry deleted.

An expiry deletes the files it removes once it has committed: the batches before it still list
them, so a reader of such a batch (``--as-of-batch``, the data source's ``asOfBatch``, the stream
source, the store browser) may meet a file that is gone. That is no damage: the batch can no longer
be read whole, the expiry's and later ones can (``BadInput``, exit 2, naming the file and the
expiry). A file no expiry removed that is missing is damage (``io.checked``'s ``MissingFile``).

``ExpiredFiles`` names the batch a reader's files are of. It goes with them (``StoreFiles.expired``,
a Spark partition), so every reader of that snapshot, on any ``Store`` object, in any process,
says the same; ``explained`` turns the ``MissingFile`` of a read into the expiry's error;
``ExpiredFiles.check`` refuses a plan that names such files before any task runs.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import BadInput, MissingFile
from .snapshots import open_snapshot

__all__ = ["ExpiredFiles", "explained", "expired_file_error"]


@dataclass(frozen=True)
class ExpiredFiles:
    """The committed batch a reader's files are of (picklable: it travels with them)."""
    batch_id: str
    batch_seq: int

    @classmethod
    def of(cls, batch: Mapping[str, Any]) -> ExpiredFiles:
        return cls(str(batch["batch_id"]), int(batch["batch_seq"]))

    def error(self, store: Any, rels: Iterable[str]) -> BadInput | None:
        """The error for the first of ``rels`` an expiry committed after this batch deleted, else
        None. The history is read at most once per call, and not at all for files an earlier
        read in this process found removed (``_removals``)."""
        rels = list(rels)
        for fresh in (False, True):
            removed = _removals(store, fresh)
            if removed is None:
                continue
            for rel in rels:
                gone = removed.get(rel)
                if gone is not None and gone.batch_seq > self.batch_seq:
                    return _deleted(rel, f"batch {self.batch_id} (seq {self.batch_seq})", gone)
        return None

    def check(self, store: Any, rels: Iterable[str]) -> None:
        """Raise the error for the first of ``rels`` (the files a plan reads) that an expiry after
        this batch deleted. Only files the latest snapshot no longer lists can be such (its file
        list: the snapshot cache's few small reads, no request per file): the history is read
        only when there are some."""
        live = open_snapshot(store).files
        gone = [rel for rel in rels if rel not in live]
        err = self.error(store, gone) if gone else None
        if err is not None:
            raise err


@contextmanager
def explained(store: Any, expired: ExpiredFiles | None) -> Iterator[None]:
    """Reads of ``store``'s files of the batch ``expired`` names: a ``MissingFile`` an expiry
    after that batch explains is raised as the expiry's error (``BadInput``); any other stays."""
    try:
        yield
    except MissingFile as e:
        if expired is None:
            raise
        try:
            known = expired.error(store, [e.path])
        except Exception:  # noqa: BLE001 - no explanation: the file is missing, as far as is known
            known = None
        if known is None:
            raise
        raise known from None


def expired_file_error(store: Any, rel: str, batch: Mapping[str, Any] | None = None) -> BadInput | None:
    """The error for ``rel``, a file of ``batch`` (None: of some earlier batch) that the store no
    longer has because an expiry committed after that batch deleted it; None when no such expiry
    did (the store lost it: the caller's ``CorruptStore``)."""
    if batch is not None:
        return ExpiredFiles.of(batch).error(store, [rel])
    latest = open_snapshot(store, history=True)
    gone = latest.removed.get(rel)
    return None if gone is None or rel in latest.files else _deleted(rel, "an earlier batch", gone)


# store URI -> the files the latest snapshot of the last history read had removed (path -> its
# remove row): a removal is final (an expired file's name is never written again: commitlog and
# consume-queue names are offsets past it, index names times), so a file found there stays
# explained; one not found there reads the history again (an expiry since, or damage).
_KNOWN: dict[str, Mapping[str, Any]] = {}


def _removals(store: Any, fresh: bool) -> Mapping[str, Any] | None:
    """The removed files of ``store``'s latest snapshot: known from an earlier read (``fresh``
    False; None when there was none), or read now (``fresh``)."""
    key = str(getattr(store, "uri", store))
    if not fresh:
        return _KNOWN.get(key)
    latest = open_snapshot(store, history=True)     # (the cache holds no removed rows)
    removed = {rel: row for rel, row in latest.removed.items() if rel not in latest.files}
    _KNOWN[key] = removed
    return removed


def _deleted(rel: str, of: str, gone: Any) -> BadInput:
    return BadInput(f"{rel} of {of} was deleted by the expiry {gone.batch_id} (seq {gone.batch_seq}): {of} can no "
                    f"longer be read whole (exported, verified, or looked up where it needs that file); "
                    f"{gone.batch_id} and later ones can (nothing was written)")
