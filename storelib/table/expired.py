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
        """The error for the first of ``rels`` an expiry committed after this batch deleted (the
        history is read once), else None."""
        latest = open_snapshot(store, history=True)     # (the cache holds no removed rows)
        for rel in rels:
            gone = latest.removed.get(rel)
            if gone is not None and rel not in latest.files and gone.batch_seq > self.batch_seq:
                return _deleted(rel, f"batch {self.batch_id} (seq {self.batch_seq})", gone)
        return None

    def check(self, store: Any, rels: Iterable[str]) -> None:
        """Raise the error for the first of ``rels`` (the files a plan reads) that an expiry after
        this batch deleted."""
        err = self.error(store, rels)
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


def _deleted(rel: str, of: str, gone: Any) -> BadInput:
    return BadInput(f"{rel} of {of} was deleted by the expiry {gone.batch_id} (seq {gone.batch_seq}): {of} can no "
                    f"longer be read whole (exported, verified, or looked up where it needs that file); "
                    f"{gone.batch_id} and later ones can (nothing was written)")
