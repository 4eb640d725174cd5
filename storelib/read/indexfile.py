"""Index access for the readers: lookups by message key (docs/FORMAT.md §3, §6).

``IndexReader`` reads the index files of a ``StoreFiles`` one header / slot / entry at a time and
answers ``queryMessage`` the way RocketMQ 5.3.3 does (64-offset cap, second-granularity index
time, no re-check of key or topic), plus ``find_by_key``, the exact variant for humans (whole
chains of every file, each candidate re-checked against its record). A snapshot's index files
carry a limit (``IndexFileRef.index_count``): later entries are skipped, their chain followed.
Layout: ``storelib.format.indexfile``; key hash: ``storelib.format.javahash``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TYPE_CHECKING


from .commitlog import RECORDS_AT_ONCE, CommitLogReader, Message
from ..format.config import StoreConfig
from ..io.checked import StoredRanges, read_stored
from ..format.indexfile import ENTRY_SIZE, SLOT_SIZE, IndexHeader, entry_offset, parse_entry, parse_slot, slot_offset
from .indexchain import entry_time_bounds, ref_header, visible_count, walk_chains
from ..format.javahash import index_key_hash
from ..format.records import decode_message, is_rollback, message_keys

if TYPE_CHECKING:                       # (storage loads pyarrow: not on the shell lookup path)
    from ..io.storage import Store
    from ..table.storefiles import IndexFileRef

__all__ = ["KeyPage", "IndexReader"]


@dataclass
class KeyPage:
    """One page of ``find_by_key``: messages sorted by (store_timestamp, commitlog_offset)."""
    messages: list[Message]
    next_after: tuple[int, int] | None     # pass as ``after`` for the next page; None = last page
    total: int                             # matches in the window after ``after`` (this page included)


class IndexReader:
    """The index files ``refs`` (load order) of one ``StoreFiles``, over its commitlog."""

    def __init__(self, store: Store, refs: list[IndexFileRef], config: StoreConfig, commitlog: CommitLogReader):
        self.store = store
        self.refs = refs
        self.config = config
        self.commitlog = commitlog
        self._headers: dict[int, IndexHeader] = {}
        self._slots = config.maxHashSlotNum

    def _read(self, i: int, offset: int, length: int) -> bytes:
        return read_stored(self.store, self.refs[i].rel, offset, length)

    # ================================================================= primitives
    def header(self, i: int) -> IndexHeader:
        """Header of index file ``i``: the snapshot's, else read from the file (once)."""
        h = self._headers.get(i)
        if h is None:
            h = self._headers[i] = ref_header(self.store, self.refs[i])
        return h

    def limit(self, i: int) -> tuple[int, bool]:
        """(indexCount to use, snapshot mode): ``indexchain.visible_count``."""
        return visible_count(self.refs[i], lambda: self.header(i))

    def slot_value(self, i: int, key_hash: int) -> int:
        """The slot of ``key_hash`` in file ``i``: position of the newest entry of its chain."""
        return parse_slot(self._read(i, slot_offset(key_hash % self._slots), SLOT_SIZE))

    def entry(self, i: int, pos: int) -> tuple[int, int, int, int]:
        """(keyHash, phyOffset, timeDiff, prevPos) of entry ``pos`` of file ``i``."""
        return parse_entry(self._read(i, entry_offset(pos, self.config), ENTRY_SIZE))

    def select_phy_offsets(self, i: int, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """IndexFile.selectPhyOffset (+ snapshot limit: later entries skipped, chain followed)."""
        h = self.header(i)
        count, snapshot = self.limit(i)
        pos = self.slot_value(i, key_hash)
        if snapshot:
            if pos <= 0 or pos >= self.config.maxIndexNum or count <= 1:
                return
        elif pos <= 0 or pos > count or count <= 1:
            return
        while True:
            if len(out) >= max_num:
                break
            khash, phy, tdiff, prev = self.entry(i, pos)
            if snapshot and pos >= count:        # written after the snapshot: invisible
                if prev <= 0 or prev >= pos:
                    break
                pos = prev
                continue
            if tdiff < 0:
                break
            time_read = h.begin_timestamp + tdiff * 1000
            if khash == key_hash and begin <= time_read <= end:
                out.append(phy)
            # Java stops at prev == pos only; a broker's chains always point backwards (prev < pos),
            # so stopping at prev >= pos answers the same and a damaged chain cannot cycle forever.
            if prev <= 0 or prev > count or prev >= pos or time_read < begin:
                break
            pos = prev

    # ================================================================= RocketMQ's answers
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> tuple[list[int], int, int]:
        """IndexService.queryOffset: (offsets in index order, indexLastUpdateTimestamp, ...Phyoffset)."""
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        key_hash = index_key_hash(f"{topic}#{key}")
        offsets: list[int] = []
        last_ts = last_phy = 0
        n = len(self.refs)
        for i in range(n - 1, -1, -1):
            h = self.header(i)
            if i == n - 1:
                last_ts, last_phy = h.end_timestamp, h.end_phy_offset
            if ((begin < h.begin_timestamp and end > h.end_timestamp)
                    or h.begin_timestamp <= begin <= h.end_timestamp
                    or h.begin_timestamp <= end <= h.end_timestamp):
                self.select_phy_offsets(i, offsets, key_hash, max_num, begin, end)
            if h.begin_timestamp < begin:
                break
            if len(offsets) >= max_num:
                break
        return offsets, last_ts, last_phy

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> dict[str, Any]:
        """DefaultMessageStore.queryMessage.

        Returns {phy_offsets, messages (decoded dicts), index_last_update_timestamp,
        index_last_update_phyoffset}; messages ascending by offset, duplicates kept.
        """
        cl = self.commitlog
        phys, msgs = [], []
        last_ts = last_phy = 0
        last_query_time = end
        for _ in range(3):
            offsets, lts, lphy = self.query_offset(topic, key, max_num, begin, last_query_time)
            if not offsets:
                break
            offsets.sort()
            last_ts, last_phy = lts, lphy
            total = 0
            for m, off in enumerate(offsets):
                msg = cl.look_message_by_offset(off)
                if m == 0:
                    if msg is None:
                        continue                 # NullPointerException, caught and logged
                    last_query_time = msg["store_timestamp"]
                size = cl.data_size(off)
                if size is None:
                    continue
                total += size
                decoded = decode_message(cl.read_at(off, size))
                if decoded is not None:
                    phys.append(off)
                    msgs.append(decoded)
            if total > 0:
                break
            if last_query_time < begin:
                break
        return {"phy_offsets": phys, "messages": msgs,
                "index_last_update_timestamp": last_ts, "index_last_update_phyoffset": last_phy}

    # ================================================================= exact variants
    def find_by_key(self, topic: str, key: str, begin: int | None = None, end: int | None = None,
                    limit: int | None = None, after: tuple[int, int] | None = None,
                    live: Callable[[Message], bool] | None = None) -> KeyPage:
        """Every stored message of ``topic`` whose UNIQ_KEY or one of whose KEYS tokens is ``key``.

        Unlike queryMessage: all index files, whole chains (no 64 cap, no stop on the rounded
        index time), each candidate re-checked against the record (topic, key, real store time in
        [begin, end]), deduplicated by commitlog offset, sorted by (store_timestamp, offset).
        ``after`` = the ``next_after`` of the previous page: only messages sorting after it.
        ``live(msg)``: whether a found message is still in the store's queues (a record a topic's
        retention removed from its queue stays in a shared segment, and in the index, until the
        segment goes).
        Index entries are pruned by time only where the entry's own time bound is certain
        (``indexchain.entry_time_bounds``, docs/FORMAT.md §3.3); anything else is read and checked.
        """
        lo = begin if begin is not None else -(2**63)
        hi = end if end is not None else 2**63 - 1
        if after is not None:
            lo = max(lo, after[0])
        with StoredRanges(self.store) as files:
            offsets = list(dict.fromkeys(self.chain_offsets(index_key_hash(f"{topic}#{key}"), lo, hi, files)))
            records = self.commitlog.records_at(offsets, files)
        found = [msg for msg in records
                 if msg is not None and _key_match(msg, topic, key, lo, hi, after) and (live is None or live(msg))]
        found.sort(key=lambda m: (m["store_timestamp"], m["commitlog_offset"]))
        total = len(found)
        if limit is not None and total > limit:
            page = found[:limit]
            last = page[-1] if page else None
            return KeyPage(page, (last["store_timestamp"], last["commitlog_offset"]) if last else None, total)
        return KeyPage(found, None, total)

    def chain_offsets(self, key_hash: int, lo: int, hi: int, files: StoredRanges | None = None) -> list[int]:
        """Commitlog offsets of every visible index entry with ``key_hash`` that may lie in [lo, hi]
        (file by file, each chain newest first). The chains of every file are walked side by side
        (``indexchain.walk_chains``) through ``files`` (default: opened for this call), so the
        slots, then each step's entries, of all files are fetched together."""
        if files is None:
            with StoredRanges(self.store) as own:
                return self.chain_offsets(key_hash, lo, hi, own)
        used, counts = [], []
        for i in range(len(self.refs)):
            self.header(i)
            count, _snapshot = self.limit(i)
            if count > 1:
                used.append(i)
                counts.append(count)
        rels = [self.refs[i].rel for i in used]
        at = slot_offset(key_hash % self._slots)
        firsts = [parse_slot(b) for b in files.read([(rel, at, SLOT_SIZE) for rel in rels])]

        hinted = [0]

        def entries_at(wanted: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
            got = [parse_entry(b) for b in files.read([(rels[k], entry_offset(pos, self.config), ENTRY_SIZE)
                                                       for k, pos in wanted])]
            # the records of this key's entries are read after the walk: the first batch of them
            # is fetched while it goes on (an IndexReader without a commitlog only walks)
            found = [e[1] for e in got if e[0] == key_hash]
            if found and self.commitlog is not None and hinted[0] < RECORDS_AT_ONCE:
                hinted[0] += len(found)
                files.hint(self.commitlog.record_heads(found))
            return got

        chains = walk_chains(firsts, entries_at, counts, self.config.maxIndexNum)
        kept = []
        for i, chain in zip(used, chains):
            begin = self.header(i).begin_timestamp
            for pos, khash, phy, tdiff in chain:
                if khash == key_hash:
                    t_lo, t_hi = entry_time_bounds(pos, tdiff, begin)
                    if t_lo <= hi and t_hi >= lo:
                        kept.append(phy)
        return kept

    def find_by_unique_key(self, topic: str, uniq_key: str,
                           live: Callable[[Message], bool] | None = None) -> list[Message]:
        """Messages of ``topic`` whose UNIQ_KEY property equals ``uniq_key`` (by store time)."""
        page = self.find_by_key(topic, uniq_key, live=live)
        return [m for m in page.messages if message_keys(m)[0] == uniq_key]


def _key_match(msg: Message, topic: str, key: str, lo: int, hi: int, after: tuple[int, int] | None) -> bool:
    """``find_by_key``'s re-check of a candidate record: topic, store time window and ``after``,
    not rolled back, ``key`` its UNIQ_KEY or one of its KEYS tokens."""
    if msg["topic"] != topic:
        return False
    ts = msg["store_timestamp"]
    if not (lo <= ts <= hi):
        return False
    if after is not None and (ts, msg["commitlog_offset"]) <= tuple(after):
        return False
    if is_rollback(msg["sys_flag"]):
        return False
    uniq, tokens = message_keys(msg)
    return key == uniq or key in tokens
