"""Records below their queue's minimum offset: left out of every walk of the CommitLog.

An expiry that removes a queue's oldest consume-queue files (a topic's own retention, ``expire
--topic``) raises that queue's minimum offset, as a broker's removal of queue files does, while the
records those files pointed at may stay in a segment that other topics still hold. Consumers never
reach them, key and id lookups leave them out (``query.QueryStore.in_queue``) and ``inspect stats``
does not count them; so a walk of the segments (range scans, the data source, the stream source, the
browser) leaves them out too, or the same store would answer the same question two ways.

A queue's floor is its first file's first unit (the files a snapshot holds). Below a first file
that an expiry did not remove there is nothing to leave out: its own head units point below the
CommitLog's minimum, into segments already gone. PREPARED and ROLLBACK records have no queue and
are never left out (``records.is_queued``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..format import commitlog as cl
from ..format.consumequeue import UNIT_SIZE

if TYPE_CHECKING:
    from ..table.storefiles import StoreFiles

__all__ = ["QueueMins", "queue_minimums", "drop_below_minimum"]


@dataclass(frozen=True)
class QueueMins:
    """The queues whose minimum offset is above 0: ``topics`` sorted; ``keys`` (topic's index << 32
    | queue id) sorted, with ``mins`` beside them."""
    topics: tuple[str, ...] = ()
    keys: tuple[int, ...] = ()
    mins: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keys)

    def entries(self) -> list[list]:
        """[[topic, queue id, minimum offset]] (the JVM reader's plan)."""
        return [[self.topics[k >> 32], k & 0xFFFFFFFF, m] for k, m in zip(self.keys, self.mins)]


def queue_minimums(files: StoreFiles) -> QueueMins:
    """The floors of ``files``'s queues that have one (a first file past unit 0)."""
    floors = {(t, q): fs[0].base // UNIT_SIZE for (t, q), fs in files.consume_queues.items() if fs and fs[0].base > 0}
    topics = tuple(sorted({t for t, _ in floors}))
    at = {t: i for i, t in enumerate(topics)}
    pairs = sorted(((at[t] << 32) | (q & 0xFFFFFFFF), m) for (t, q), m in floors.items())
    return QueueMins(topics, tuple(k for k, _ in pairs), tuple(m for _, m in pairs))


def drop_below_minimum(decoded: pa.Table, mins: QueueMins | None) -> pa.Table:
    """``decoded`` (columns topic, queue_id, queue_offset, sys_flag) without the queued records
    below their queue's minimum offset."""
    if not mins or decoded.num_rows == 0:
        return decoded
    ti = pc.index_in(decoded.column("topic"), value_set=pa.array(mins.topics, pa.string()))
    ti = ti.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    if not (ti >= 0).any():
        return decoded
    qid = decoded.column("queue_id").to_numpy(zero_copy_only=False).astype(np.int64) & 0xFFFFFFFF
    keys = np.asarray(mins.keys, np.int64)
    probe = (ti << 32) | qid
    pos = np.minimum(np.searchsorted(keys, probe), len(keys) - 1)
    floor = np.where((ti >= 0) & (keys[pos] == probe), np.asarray(mins.mins, np.int64)[pos], -1)
    flag = decoded.column("sys_flag").to_numpy(zero_copy_only=False) & cl.TRANSACTION_MASK
    queued = (flag == cl.TRANSACTION_NOT) | (flag == cl.TRANSACTION_COMMIT)
    hide = queued & (decoded.column("queue_offset").to_numpy(zero_copy_only=False) < floor)
    return decoded.filter(pa.array(~hide)) if hide.any() else decoded
