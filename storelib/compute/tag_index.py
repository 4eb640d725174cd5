"""The newest 5.x line's TAGS index entries (rocketmqVersion=5.5, docs/FORMAT.md §12).

RocketMQ 5.5's ``IndexService.buildIndex`` puts, after a message's UNIQ_KEY and KEYS entries, one
more entry for a non-empty TAGS property, key ``topic + "#T#" + tags`` (ROLLBACK messages get no
entries at all). ``with_tag_entries`` adds those entries to the (message index, key hash) arrays
of the other keys, keeping dispatch order.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import java_hash_continue

__all__ = ["with_tag_entries"]

_TAG_INFIX = tuple(ord(c) for c in "#T#")


@njit(cache=True, nogil=True)
def _tag_hashes(data, starts, ends, topic_hash, out):
    for k in range(starts.shape[0]):
        h = np.int64(topic_hash[k])
        for c in _TAG_INFIX:
            h = (h * 31 + c) & 0xFFFFFFFF
        out[k] = java_hash_continue(h, data, starts[k], ends[k])[0]


def with_tag_entries(key_msg: np.ndarray, key_hash: np.ndarray, pdata, tag_start: np.ndarray, tag_end: np.ndarray,
                     indexed: np.ndarray, topic_hash: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(message index, java hash uint32) of every entry, a tag entry after each tagged message's
    other entries."""
    rows = np.flatnonzero(indexed & (tag_start >= 0) & (tag_end > tag_start))
    if not len(rows):
        return key_msg, key_hash
    hashes = np.empty(len(rows), np.int64)
    _tag_hashes(pdata, tag_start[rows].astype(np.int64), tag_end[rows].astype(np.int64),
                topic_hash[rows].astype(np.int64), hashes)
    msg = np.concatenate([np.asarray(key_msg, np.int64), rows.astype(np.int64)])
    order = np.argsort(msg, kind="stable")          # a message's tag entry after its other keys
    return msg[order], np.concatenate([np.asarray(key_hash).astype(np.uint32), hashes.astype(np.uint32)])[order]
