"""Batch key lookup: millions of (topic, key[, begin, end]) queries in one distributed job.

    from storelib.read.keylookup import lookup_keys
    df = lookup_keys(spark, "/data/store", keys_df)     # keys: DataFrame or pyarrow.Table

Exact semantics (like ``StoreReader.find_by_key``): every stored, non-rollback message of
``topic`` whose UNIQ_KEY or one of whose KEYS tokens equals ``key`` and whose real store
timestamp lies in [begin, end] (null = unbounded); no 64 cap, no second rounding, hash-colliding
keys filtered out. Result: ``query_topic, query_key, query_begin, query_end`` + the message
columns of ``rangescan.MESSAGE_DDL``, one row per (distinct query, message).

Two plans; Spark schedules, executors read the store files themselves. Local segments are
memory-mapped, so a task touches only the pages of the records it checks. With ``lazy=True``
either plan's tasks return only the query columns and the matched record's offset and size; the
other message columns come from an Arrow UDF over those (``keylookup_rows``), which Spark prunes
when a query does not use them.

Broadcast plan (the default while the distinct queries fit ``broadcast_limit`` rows, like
Spark's broadcast join): the queries and their index key hashes go to every task as one Arrow
table, sorted by hash; each task owns a range of commitlog offsets, reads the span of each index
file's entries that points into it (binary search on the entries' offsets), keeps those with a
wanted hash (a bit table, then binary searches in the sorted queries), reads its part of the
segment once and checks the records exactly. One stage, no shuffle; no per-entry Python.

Shuffle plan (more queries than that):

1. keys -> index key hash ``abs(javaHash(topic + "#" + key))`` (vectorized, ``mapInArrow``);
   the distinct hashes (4 bytes each) are broadcast.
2. one task per index file: reads the file's entry table once (up to the snapshot's
   ``index_count``) and keeps the entries whose keyHash is wanted; every entry of hash h lies on
   the chain of slot h % slots, so this equals following the chains of all needed slots, without
   the random reads. With few keys (estimated cost of range reads below one sequential read) it
   reads only the needed slot ints and follows their chains with range reads instead. Each
   candidate carries the store-time interval its timeDiff guarantees, for pruning.
3. candidates join the queries on the hash (time-pruned), are repartitioned by commitlog
   segment and each segment's records are read once (one range for many records, single
   record reads for few), decoded vectorized and checked exactly (topic, key, store time,
   record start, snapshot limit).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import messages as codec
from ..format import commitlog as cl, indexfile
from ..compute.arrays import single_array, sorted_unique
from ..io.checked import StoredRanges, open_stored, read_stored, read_stored_at
from .indexchain import I64_MAX, I64_MIN, entry_time_bounds, ref_header, visible_count, walk_chains
from .keylookup_rows import LIGHT_DDL, light_table, mapped_segment, with_message_columns
from ..codec.properties import parse_properties
from .rangescan import MESSAGE_DDL, message_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..format.config import StoreConfig
    from ..io.storage import Store
    from ..table.snapshots import StoreSnapshot
    from ..table.storefiles import CommitLogSegment, IndexFileRef, StoreFiles


__all__ = ["QUERY_DDL", "RESULT_DDL", "BROADCAST_LIMIT", "key_hashes", "index_candidates", "check_candidates",
           "lookup_range", "lookup_keys", "lookup_keys_local"]

QUERY_DDL = "topic string, key string, begin bigint, end bigint"
HASHED_DDL = QUERY_DDL + ", key_hash int"
CAND_DDL = "key_hash int, phy bigint, t_lo bigint, t_hi bigint"
RESULT_DDL = "query_topic string, query_key string, query_begin bigint, query_end bigint, " + MESSAGE_DDL
_RANDOM_READ_COST = 4096            # bytes a random read is worth, for the scan/range-read choice


# ----------------------------------------------------------------------------- step 1: hashes
def key_hashes(topics: pa.Array, keys: pa.Array) -> np.ndarray:
    """IndexFile.indexKeyHashMethod(topic + "#" + key), vectorized."""
    joined = pc.binary_join_element_wise(topics.cast(pa.large_string()), keys.cast(pa.large_string()),
                                         pa.scalar("#", pa.large_string()))
    return codec.index_key_hash(codec.java_hash(joined))


def _add_hash(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        h = key_hashes(b.column(0), b.column(1))
        yield pa.RecordBatch.from_arrays(list(b.columns) + [pa.array(h, pa.int32())],
                                         names=list(b.schema.names) + ["key_hash"])


# ----------------------------------------------------------------------------- step 2: index
def index_candidates(store: Store, config: StoreConfig, ref: IndexFileRef, hashes: np.ndarray) -> pa.RecordBatch:
    """Entries of one index file whose keyHash is in ``hashes`` (sorted unique int32)."""
    header = ref_header(store, ref)
    count, _snapshot = visible_count(ref, lambda: header)
    entries_at = indexfile.entries_offset(config)
    empty = pa.RecordBatch.from_pydict({"key_hash": pa.array([], pa.int32()), "phy": pa.array([], pa.int64()),
                                        "t_lo": pa.array([], pa.int64()), "t_hi": pa.array([], pa.int64())})
    if count <= 1 or not len(hashes):
        return empty
    avg_chain = count / max(1, header.hash_slot_count)
    if len(hashes) * (1 + avg_chain) * _RANDOM_READ_COST < count * indexfile.ENTRY_SIZE:
        kh, phy, td, pos = _chains_by_range_reads(store, config, ref.rel, count, hashes, entries_at)
    else:
        raw = read_stored(store, ref.rel, entries_at, count * indexfile.ENTRY_SIZE)
        rec = indexfile.decode_entries(raw)
        pos = np.arange(len(rec), dtype=np.int64)
        sel = (pos >= 1) & np.isin(rec["hash"], hashes)
        kh, phy, td, pos = rec["hash"][sel], rec["phys"][sel], rec["time_diff"][sel], pos[sel]
    lo, hi = entry_time_bounds(pos, td, header.begin_timestamp)
    return pa.RecordBatch.from_pydict({"key_hash": pa.array(kh.astype(np.int32), pa.int32()),
                                       "phy": pa.array(phy.astype(np.int64), pa.int64()),
                                       "t_lo": pa.array(lo, pa.int64()), "t_hi": pa.array(hi, pa.int64())})


def _chains_by_range_reads(store: Store, config: StoreConfig, rel: str, count: int, hashes: np.ndarray,
                           entries_at: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read only the needed slot ints, then walk their chains (newest first), side by side: each
    step reads the next entry of every chain still going at once (``StoredRanges``: hinted
    together locally, concurrent requests on an object store), slot by slot in the result.

    Entries at positions >= count were written after the snapshot: skipped, chain followed.
    """
    slots = config.maxHashSlotNum
    want = set(int(h) for h in hashes)
    needed = np.unique(hashes.astype(np.int64) % slots)
    with StoredRanges(store) as files:
        firsts = [indexfile.parse_slot(b) for b in files.read([(rel, indexfile.slot_offset(int(slot)), indexfile.SLOT_SIZE)
                                                                for slot in needed])]

        def entries(wanted: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
            return [indexfile.parse_entry(b) for b in files.read(
                [(rel, entries_at + pos * indexfile.ENTRY_SIZE, indexfile.ENTRY_SIZE) for _, pos in wanted])]
        chains = walk_chains(firsts, entries, [count] * len(firsts), config.maxIndexNum)
    hits = [e for chain in chains for e in chain if e[1] in want]         # (pos, keyHash, phyOffset, timeDiff)
    return (np.array([e[1] for e in hits], np.int32), np.array([e[2] for e in hits], np.int64),
            np.array([e[3] for e in hits], np.int32), np.array([e[0] for e in hits], np.int64))


# ----------------------------------------------------------------------------- step 3: records
def _read_records(store: Store, seg: CommitLogSegment, positions: np.ndarray,
                  max_record: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buf, starts, ok) for record starts ``positions`` (sorted unique) of one segment.

    Many positions: the bytes from the first position to the end of the valid bytes, or only to
    the last position + ``max_record`` when that is given (a range task's share of a segment):
    a view of the memory-mapped segment locally, else one read."""
    n = len(positions)
    ok = np.zeros(n, bool)
    if n <= 32:
        parts, starts, at = [], np.zeros(n, np.int64), 0
        with open_stored(store, seg.rel) as fh:
            for i, p in enumerate(positions):
                p = int(p)
                if p < 0 or p + cl.BLANK_SIZE > seg.valid:
                    continue
                size, magic = cl.parse_size_magic(read_stored_at(fh, seg.rel, cl.BLANK_SIZE, p))
                if not cl.is_record_start(size, magic, p, seg.valid):
                    continue
                parts.append(read_stored_at(fh, seg.rel, size, p))
                starts[i] = at
                at += size
                ok[i] = True
        buf = np.frombuffer(b"".join(parts), np.uint8) if parts else np.zeros(0, np.uint8)
        return buf, starts, ok
    lo = int(positions[0])
    hi = seg.valid if max_record is None else min(seg.valid, int(positions[-1]) + max_record)
    mapped = mapped_segment(store, seg) if lo < hi else None       # only the records' pages are touched
    if mapped is not None:
        buf = mapped[lo:hi]
    else:
        buf = np.frombuffer(read_stored(store, seg.rel, lo, hi - lo), np.uint8) if lo < hi else np.zeros(0, np.uint8)
    rel = positions - lo
    inb = (positions >= 0) & (rel + cl.BLANK_SIZE <= len(buf))
    if inb.any():
        r = rel[inb]
        sizes = codec.gather_int(buf, r + cl.POS_TOTALSIZE, cl.SIZE_TOTALSIZE).astype(np.int64)
        magics = codec.gather_int(buf, r + cl.POS_MAGIC, cl.SIZE_MAGIC)
        good = cl.is_record_start(sizes, magics, r, len(buf))
        ok[np.flatnonzero(inb)[good]] = True
    return buf, np.where(ok, rel, 0), ok


def _select_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)`` for increasing ``rows``, without copying where it can: every row in
    order is the table itself, a few runs of consecutive rows are zero-copy slices (the usual
    case: one candidate per record, a few hash collisions dropped), so bodies and properties
    are not copied again."""
    if len(rows) == table.num_rows and (not len(rows) or (rows[0] == 0 and (np.diff(rows) == 1).all())):
        return table
    if len(rows) > 1 and (np.diff(rows) > 0).all():
        cuts = np.flatnonzero(np.diff(rows) != 1) + 1
        if len(cuts) < len(rows) // 256:
            starts = np.concatenate([[0], cuts])
            ends = np.concatenate([cuts, [len(rows)]])
            return pa.concat_tables([table.slice(int(rows[a]), int(b - a)) for a, b in zip(starts, ends)])
    return table.take(pa.array(rows))


def _exact_matches(sub: pa.Table, msgs: pa.Table, k: np.ndarray) -> np.ndarray:
    """Mask over candidate rows ``sub`` (query topic/key/begin/end) of those whose record
    ``msgs[k]`` really matches: topic, UNIQ_KEY or a KEYS token, store time in the window, not a
    rolled-back transaction. Only the light columns of ``msgs`` are gathered for the check."""
    take_k = pa.array(k)
    qt, qk = sub.column("topic"), sub.column("key")
    ts = np.asarray(msgs.column("store_timestamp"))[k]
    qb = np.asarray(sub.column("begin").fill_null(I64_MIN))
    qe = np.asarray(sub.column("end").fill_null(I64_MAX))
    keep = (ts >= qb) & (ts <= qe)
    keep &= np.asarray(pc.equal(msgs.column("topic").take(take_k), qt).fill_null(False))
    keep &= (np.asarray(msgs.column("sys_flag"))[k] & cl.TRANSACTION_MASK) != cl.TRANSACTION_ROLLBACK
    key_ok = np.asarray(pc.equal(msgs.column("uniq_key").take(take_k), qk).fill_null(False))
    toks = pc.split_pattern(single_array(msgs.column("keys").take(take_k)).fill_null(""), " ")
    flat = pc.list_flatten(toks)
    parent = np.asarray(pc.list_parent_indices(toks))
    if len(flat):
        hit = np.asarray(pc.equal(flat, single_array(qk).take(pa.array(parent))).fill_null(False))
        key_ok[parent[hit]] = True
    matches: np.ndarray = keep & key_ok
    return matches


def _check_columns(dec: pa.Table) -> pa.Table:
    """The columns ``_exact_matches`` and the light result read, without building the rest of
    ``message_table`` (no body, no properties map kept)."""
    _, extra = parse_properties(dec.column("properties_string").combine_chunks(), ("KEYS", "UNIQ_KEY"))
    return pa.table({"commitlog_offset": dec.column("commitlog_offset"), "store_size": dec.column("store_size"),
                     "topic": dec.column("topic"), "sys_flag": dec.column("sys_flag"),
                     "store_timestamp": dec.column("store_timestamp"), "keys": extra["KEYS"],
                     "uniq_key": extra["UNIQ_KEY"]})


def check_candidates(store: Store, segs: dict[int, CommitLogSegment], fsize: int, cand: pa.Table,
                     max_record: int | None = None, distinct: bool = False, light: bool = False) -> list[pa.Table]:
    """Exact check of candidate rows (query topic/key/begin/end, phy) -> RESULT rows (Arrow).

    ``distinct``: the caller guarantees one row per (query, phy) already. ``light``: only the
    ``keylookup_rows.LIGHT_NAMES`` columns, and the bodies are not even copied out of the records
    (the Spark plans decode the other columns only when a query uses them)."""
    out: list[pa.Table] = []
    if cand.num_rows == 0:
        return out
    # one row per (query, message): duplicate queries / a key indexed twice in one message
    cand = cand.select(["topic", "key", "begin", "end", "phy"])
    if not distinct:
        cand = cand.group_by(["topic", "key", "begin", "end", "phy"], use_threads=False).aggregate([])
    phy_all = np.asarray(cand.column("phy"), dtype=np.int64)
    seg_of = phy_all - phy_all % fsize
    order = np.argsort(seg_of, kind="stable")
    bounds = np.flatnonzero(np.diff(seg_of[order])) + 1
    for grp in np.split(order, bounds):
        base = int(seg_of[grp[0]])
        seg = segs.get(base)
        if seg is None:
            continue                          # expired, or beyond the snapshot
        phys = phy_all[grp]
        uniq = sorted_unique(phys)
        buf, starts, ok = _read_records(store, seg, uniq - base, max_record)
        uniq, starts = uniq[ok], starts[ok]
        if not len(uniq):
            continue
        # a damaged record matches nothing
        dec, fits = codec.decode_valid_records(buf, base, starts, body=not light)
        uniq = uniq[fits]
        if not len(uniq):
            continue
        stored_phy = np.asarray(dec.column("commitlog_offset"))
        good = stored_phy == uniq              # a real record start of this store
        msgs = _check_columns(dec) if light else message_table(dec)
        # candidate -> record row
        k = np.searchsorted(uniq, phys)
        k_ok = (k < len(uniq))
        k = np.where(k_ok, k, 0)
        k_ok &= (uniq[k] == phys) & good[k]
        rows = grp[k_ok]
        k = k[k_ok]
        if not len(rows):
            continue
        sub = _select_rows(cand, rows)
        keep = _exact_matches(sub, msgs, k)
        if not keep.any():
            continue
        sub, m = _select_rows(sub, np.flatnonzero(keep)), _select_rows(msgs, k[keep])
        if light:
            out.append(light_table(sub, m.column("commitlog_offset"), m.column("store_size")))
            continue
        cols = [sub.column("topic"), sub.column("key"), sub.column("begin"), sub.column("end")] + list(m.columns)
        names = ["query_topic", "query_key", "query_begin", "query_end"] + m.schema.names
        out.append(pa.table(cols, names=names))
    return out


# ----------------------------------------------------------------------------- broadcast plan
def _query_table(keys: pa.Table) -> pa.Table:
    """Distinct (topic, key, begin, end) queries with their index key hash (Arrow)."""
    n = keys.num_rows
    cols = keys.column_names
    q = pa.table({"topic": keys.column("topic").cast(pa.string()), "key": keys.column("key").cast(pa.string()),
                  "begin": keys.column("begin").cast(pa.int64()) if "begin" in cols else pa.nulls(n, pa.int64()),
                  "end": keys.column("end").cast(pa.int64()) if "end" in cols else pa.nulls(n, pa.int64())})
    q = q.filter(pc.and_(pc.is_valid(q.column("topic")), pc.is_valid(q.column("key"))))
    h = key_hashes(single_array(q.column("topic")), single_array(q.column("key")))
    q = q.append_column("key_hash", pa.array(h, pa.int32()))
    # Sorted by hash, so every task matches index entries to queries with two binary searches
    # instead of building a hash join of all the queries; the other columns break the (rare)
    # ties, which puts duplicate queries next to each other: dropping a row equal to the one
    # before it is cheaper than a hash aggregation of the strings.
    names = ["key_hash", "topic", "key", "begin", "end"]
    q = q.take(pc.sort_indices(q, sort_keys=[(c, "ascending") for c in names]))
    if q.num_rows < 2:
        return q
    dup = np.ones(q.num_rows - 1, bool)
    for c in names:
        col = single_array(q.column(c))
        cur, prev = col.slice(1), col.slice(0, len(col) - 1)
        same = pc.fill_null(pc.equal(cur, prev), False)
        if col.null_count:                                 # an unbounded end equals another
            same = pc.or_(same, pc.and_(pc.is_null(cur), pc.is_null(prev)))
        dup &= np.asarray(same)
    return q.filter(pa.array(np.concatenate([[True], ~dup])))


def _entry_phy(fh: Any, rel: str, entries_at: int, pos: int) -> int:      # (fh: an open_stored handle)
    return indexfile.parse_entry(read_stored_at(fh, rel, indexfile.ENTRY_SIZE, entries_at + pos * indexfile.ENTRY_SIZE))[1]


def _first_entry_at_or_after(fh: Any, rel: str, entries_at: int, count: int, phy: int) -> int:
    """Smallest entry position in [1, count] whose phyOffset is >= ``phy`` (binary search by
    single-entry reads; entries are appended in commitlog order)."""
    a, b = 1, count
    while a < b:
        mid = (a + b) // 2
        if _entry_phy(fh, rel, entries_at, mid) < phy:
            a = mid + 1
        else:
            b = mid
    return a


def _entries_for_range(store: Store, rel: str, entries_at: int, count: int, lo: int,
                       hi: int) -> tuple[int, np.ndarray]:
    """(first position, entries) of the entries of one index file pointing into [lo, hi).

    A range task reads only its share of the entry table: entries are appended in commitlog
    order (a broker's dispatcher and our writer both do), so the share is one span found by
    binary search. The span is checked (sorted, bounded by entries outside [lo, hi)); a file
    that breaks the order anywhere near it is read whole instead."""
    with open_stored(store, rel) as fh:
        a = _first_entry_at_or_after(fh, rel, entries_at, count, lo)
        b = _first_entry_at_or_after(fh, rel, entries_at, count, hi)
        first = max(1, a - 1)                  # one neighbour each side, for the check
        last = min(count, b + 1)
        raw = read_stored_at(fh, rel, (last - first) * indexfile.ENTRY_SIZE, entries_at + first * indexfile.ENTRY_SIZE) \
            if last > first else b""
    rec = indexfile.decode_entries(raw)
    phy = rec["phys"]
    ordered = (len(phy) < 2 or bool((phy[1:] >= phy[:-1]).all())) \
        and (first == a or phy[0] < lo) and (last == b or phy[-1] >= hi)
    if ordered:
        return first, rec
    whole = indexfile.decode_entries(read_stored(store, rel, entries_at, count * indexfile.ENTRY_SIZE))
    return 0, whole


def _index_entries(store: Store, config: StoreConfig, ref: IndexFileRef, lo: int, hi: int, query_hashes: np.ndarray,
                   hash_filter: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(phy, t_lo, t_hi, q_first, q_end) of the entries of one index file pointing into [lo, hi)
    whose keyHash is one of ``query_hashes`` (sorted, duplicates allowed; ``hash_filter`` is
    their ``_hash_filter``): queries ``q_first[i]:q_end[i]`` carry entry i's hash."""
    header = ref_header(store, ref)
    count, _snapshot = visible_count(ref, lambda: header)
    if count <= 1 or not len(query_hashes):
        return None
    # Entries are appended in commitlog order, between the header's begin and end offsets (a
    # rolled file's begin is inherited from the file before, lower still): a file wholly outside
    # [lo, hi) is not read.
    if header.end_phy_offset < lo or header.begin_phy_offset >= hi:
        return None
    first, rec = _entries_for_range(store, ref.rel, indexfile.entries_offset(config), count, lo, hi)
    phy = rec["phys"]
    at = np.flatnonzero((phy >= lo) & (phy < hi))
    pos = at + first
    at, pos = at[pos >= 1], pos[pos >= 1]
    kh = rec["hash"][at]
    maybe = hash_filter[kh & _FILTER_MASK]
    at, pos, kh = at[maybe], pos[maybe], kh[maybe]
    q_first = np.searchsorted(query_hashes, kh)
    hit = query_hashes[np.minimum(q_first, len(query_hashes) - 1)] == kh
    at, pos, kh, q_first = at[hit], pos[hit], kh[hit], q_first[hit]
    q_end = np.searchsorted(query_hashes, kh, side="right")
    t_lo, t_hi = entry_time_bounds(pos, rec["time_diff"][at], header.begin_timestamp)
    return phy[at].astype(np.int64), t_lo, t_hi, q_first, q_end


_FILTER_MASK = (1 << 24) - 1


def _hash_filter(query_hashes: np.ndarray) -> np.ndarray:
    """A 16M-entry table of which low 24 bits occur among the query hashes: one random load per
    index entry discards most non-matching entries before the binary searches (a random
    searchsorted in a few MB of hashes costs about 20 cache misses per entry)."""
    table = np.zeros(_FILTER_MASK + 1, bool)
    table[query_hashes & _FILTER_MASK] = True
    return table


def _expand_matches(q_first: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(entry index, query index) of every pair of an entry with a query of its hash."""
    n = q_end - q_first
    entry = np.repeat(np.arange(len(n)), n)
    starts = np.cumsum(n) - n
    return entry, q_first[entry] + (np.arange(len(entry)) - starts[entry])


def lookup_range(store: Store, files: StoreFiles, queries: pa.Table, lo: int, hi: int,
                 light: bool = False) -> list[pa.Table]:
    """RESULT tables of the broadcast plan for commitlog offsets [lo, hi) (``light``: only the
    columns of ``keylookup_rows.LIGHT_NAMES``).

    ``queries``: distinct queries with their key_hash (``_query_table``, which sorts them by it)."""
    cfg = files.config
    query_hashes = np.asarray(queries.column("key_hash"), np.int32)
    if len(query_hashes) > 1 and not (query_hashes[1:] >= query_hashes[:-1]).all():
        queries = queries.sort_by("key_hash")           # a caller's own table
        query_hashes = np.asarray(queries.column("key_hash"), np.int32)
    hash_filter = _hash_filter(query_hashes)
    parts = [t for t in (_index_entries(store, cfg, ref, lo, hi, query_hashes, hash_filter) for ref in files.index)
             if t is not None]
    if not parts:
        return []
    phy, t_lo, t_hi, q_first, q_end = (np.concatenate(c) for c in zip(*parts))
    entry, qid = _expand_matches(q_first, q_end)
    phy = phy[entry]
    b = np.asarray(queries.column("begin").fill_null(I64_MIN))[qid]
    e = np.asarray(queries.column("end").fill_null(I64_MAX))[qid]
    keep = (t_hi[entry] >= b) & (t_lo[entry] <= e)
    qid, phy = qid[keep], phy[keep]
    # one row per (query, message): a key indexed twice in one message has two entries
    order = np.lexsort((qid, phy))
    qid, phy = qid[order], phy[order]
    first = np.ones(len(qid), bool)
    first[1:] = (qid[1:] != qid[:-1]) | (phy[1:] != phy[:-1])
    qid, phy = qid[first], phy[first]
    cands = queries.select(["topic", "key", "begin", "end"]).take(pa.array(qid)).append_column(
        "phy", pa.array(phy, pa.int64()))
    segs = {s.base: s for s in files.commitlog}
    slack = cfg.maxMessageSize + codec.MESSAGE_SIZE_SLACK
    return check_candidates(store, segs, cfg.mappedFileSizeCommitLog, cands, max_record=slack, distinct=True,
                            light=light)


def _offset_ranges(files: StoreFiles, pieces: int) -> list[tuple[int, int]]:
    """About ``pieces`` [lo, hi) commitlog offset ranges of equal valid bytes. Big segments are
    cut; runs of small segments share a range (a task per small segment would cost more)."""
    segs = [s for s in files.commitlog if s.valid > 0]
    total = sum(s.valid for s in segs)
    if not total:
        return []
    target = max(1, -(-total // max(1, pieces)))
    out: list[tuple[int, int]] = []
    start, acc = segs[0].base, 0
    for s in segs:
        pos = 0
        while s.valid - pos >= target - acc:
            pos += target - acc
            out.append((start, s.base + pos))
            start, acc = s.base + pos, 0
        acc += s.valid - pos
    if acc:
        out.append((start, segs[-1].base + segs[-1].valid))
    return out


# ----------------------------------------------------------------------------- driver
def _keys_df(spark: SparkSession, keys: pa.Table | DataFrame) -> DataFrame:
    from pyspark.sql import functions as F
    if isinstance(keys, pa.Table):
        cols = {n: keys.column(n) for n in keys.column_names}
        n = keys.num_rows
        t = pa.table({"topic": cols["topic"].cast(pa.string()), "key": cols["key"].cast(pa.string()),
                      "begin": cols["begin"].cast(pa.int64()) if "begin" in cols else pa.nulls(n, pa.int64()),
                      "end": cols["end"].cast(pa.int64()) if "end" in cols else pa.nulls(n, pa.int64())})
        return spark.createDataFrame(t)
    df = keys
    for c in ("begin", "end"):
        if c not in df.columns:
            df = df.withColumn(c, F.lit(None).cast("bigint"))
    return df.select(F.col("topic").cast("string"), F.col("key").cast("string"),
                     F.col("begin").cast("bigint"), F.col("end").cast("bigint"))


BROADCAST_LIMIT = 5_000_000     # distinct queries sent to every task (about 40 bytes each + keys)


def lookup_keys(spark: SparkSession, store_uri: str, keys: pa.Table | DataFrame, as_of_batch: str | int | None = None,
                config: StoreConfig | None = None, partitions: int | None = None, broadcast_limit: int = BROADCAST_LIMIT,
                lazy: bool = False, snapshot: StoreSnapshot | None = None) -> DataFrame:
    """DataFrame (RESULT_DDL) of the exact matches of every (topic, key[, begin, end]) in ``keys``.

    ``keys``: a Spark DataFrame or pyarrow Table with columns topic, key and optional begin/end
    (inclusive store-time bounds in ms; null = unbounded). Duplicate queries are answered once.
    Up to ``broadcast_limit`` distinct queries use the broadcast plan, more the shuffle plan
    (0 forces the shuffle plan). ``lazy``: the tasks return only the query columns,
    commitlog_offset and store_size, and the other message columns are decoded by a second pass
    over the matched records only when a query uses them (``count()`` and selects of those columns
    skip it, full rows pay for it: +1.4 s at 1M rows, bench/run.py ``batch``); default: the tasks
    return whole rows."""
    from pyspark.sql import functions as F
    from ..table.storefiles import open_files
    from ..io.storage import Store
    store = Store(store_uri)
    files, info = open_files(store, as_of_batch, config, snapshot)
    cfg = files.config
    uri, expired = store.uri, files.expired        # (the batch the files are of: table.expired)
    sc = spark.sparkContext
    # An Arrow table the broadcast plan can take goes straight to _query_table: no round trip of
    # the keys through the JVM.
    if broadcast_limit > 0 and isinstance(keys, pa.Table) and keys.num_rows <= broadcast_limit:
        return _lookup_broadcast(spark, store, files, _query_table(keys), partitions, lazy)
    queries = _keys_df(spark, keys).where(F.col("topic").isNotNull() & F.col("key").isNotNull())
    if broadcast_limit > 0 and not isinstance(keys, pa.Table) \
            and queries.limit(broadcast_limit + 1).count() <= broadcast_limit:
        return _lookup_broadcast(spark, store, files, _query_table(queries.toArrow()), partitions, lazy)
    hashed = queries.mapInArrow(_add_hash, HASHED_DDL).persist()
    # 4 bytes a key to the driver (no shuffle); duplicates are dropped there
    hashes = np.unique(np.asarray(hashed.select("key_hash").toArrow().column(0), dtype=np.int32))
    if not len(files.index) or not len(hashes):
        return spark.createDataFrame([], RESULT_DDL)
    b_hashes = sc.broadcast(hashes)
    b_index = sc.broadcast([tuple(r) for r in files.index])
    b_cfg = sc.broadcast(cfg)

    def scan_index(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from storelib.read.keylookup import index_candidates
        from storelib.table.expired import explained
        from storelib.table.storefiles import IndexFileRef
        from storelib.io.storage import Store as _Store
        st = _Store(uri)
        with explained(st, expired):
            for b in batches:
                for i in b.column(0).to_pylist():
                    yield index_candidates(st, b_cfg.value, IndexFileRef(*b_index.value[i]), b_hashes.value)

    n_idx = len(files.index)
    cands = spark.range(0, n_idx, 1, n_idx).mapInArrow(scan_index, CAND_DDL)
    joined = cands.join(hashed, "key_hash").where(
        (F.col("begin").isNull() | (F.col("t_hi") >= F.col("begin")))
        & (F.col("end").isNull() | (F.col("t_lo") <= F.col("end")))
    ).select("topic", "key", "begin", "end", "phy")
    fsize = cfg.mappedFileSizeCommitLog
    segs = {s.base: (s.rel, s.base, s.valid) for s in files.commitlog}
    b_segs = sc.broadcast(segs)
    n_parts = partitions or max(1, min(len(segs), 4 * sc.defaultParallelism))
    by_seg = joined.withColumn("seg", F.col("phy") - F.col("phy") % F.lit(fsize)) \
        .repartition(n_parts, "seg").drop("seg")

    def fetch(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from storelib.read.keylookup import check_candidates
        from storelib.table.expired import explained
        from storelib.table.storefiles import CommitLogSegment
        from storelib.io.storage import Store as _Store
        st = _Store(uri)
        tbl = pa.Table.from_batches(list(batches))
        if tbl.num_rows == 0:
            return
        seg_map = {b: CommitLogSegment(*v) for b, v in b_segs.value.items()}
        with explained(st, expired):
            for t in check_candidates(st, seg_map, fsize, tbl, light=lazy):
                yield from t.to_batches()

    if not lazy:
        return by_seg.mapInArrow(fetch, RESULT_DDL)
    return with_message_columns(by_seg.mapInArrow(fetch, LIGHT_DDL), uri, files.commitlog, fsize, expired)


def _lookup_broadcast(spark: SparkSession, store: Store, files: StoreFiles, q: pa.Table, partitions: int | None,
                      lazy: bool = False) -> DataFrame:
    import pyarrow.ipc as ipc
    from ..table.storefiles import StoreFiles
    sc = spark.sparkContext
    ranges = _offset_ranges(files, partitions or 2 * sc.defaultParallelism)
    if not ranges or not files.index or q.num_rows == 0:
        return spark.createDataFrame([], RESULT_DDL)
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, q.schema) as w:
        w.write_table(q)
    b_q = sc.broadcast(sink.getvalue().to_pybytes())
    b_ranges = sc.broadcast(ranges)
    # The driver's snapshot, without the consume queues the lookup does not read.
    b_files = sc.broadcast(StoreFiles(config=files.config, commitlog=list(files.commitlog), index=list(files.index),
                                      expired=files.expired))
    uri = store.uri

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from storelib.read.keylookup import lookup_range
        from storelib.io.storage import Store as _Store
        from storelib.table.expired import explained
        st = _Store(uri)
        fl = b_files.value
        queries = ipc.open_stream(pa.py_buffer(b_q.value)).read_all()
        with explained(st, fl.expired):
            for b in batches:
                for i in b.column(0).to_pylist():
                    lo, hi = b_ranges.value[i]
                    for t in lookup_range(st, fl, queries, lo, hi, light=lazy):
                        yield from t.to_batches()

    if not lazy:
        return spark.range(0, len(ranges), 1, len(ranges)).mapInArrow(run, RESULT_DDL)

    light = spark.range(0, len(ranges), 1, len(ranges)).mapInArrow(run, LIGHT_DDL)
    return with_message_columns(light, uri, files.commitlog, files.config.mappedFileSizeCommitLog, files.expired)


def lookup_keys_local(store_uri: str, keys: pa.Table, as_of_batch: str | int | None = None,
                      config: StoreConfig | None = None, snapshot: StoreSnapshot | None = None) -> pa.Table | None:
    """The same lookup without Spark (one process), for small key sets and tests; None: no match."""
    from ..table.expired import explained
    from ..table.storefiles import open_files
    from ..io.storage import Store
    store = Store(store_uri)
    files, info = open_files(store, as_of_batch, config, snapshot)
    with explained(store, files.expired):
        return _lookup_here(store, files, keys)


def _lookup_here(store: Store, files: StoreFiles, keys: pa.Table) -> pa.Table | None:
    n = keys.num_rows
    q = pa.table({"topic": keys.column("topic").cast(pa.string()), "key": keys.column("key").cast(pa.string()),
                  "begin": keys.column("begin").cast(pa.int64()) if "begin" in keys.column_names else pa.nulls(n, pa.int64()),
                  "end": keys.column("end").cast(pa.int64()) if "end" in keys.column_names else pa.nulls(n, pa.int64())})
    q = q.group_by(["topic", "key", "begin", "end"], use_threads=False).aggregate([])
    h = key_hashes(q.column("topic").combine_chunks(), q.column("key").combine_chunks())
    q = q.append_column("key_hash", pa.array(h, pa.int32()))
    hashes = np.unique(h)
    cands = pa.Table.from_batches([index_candidates(store, files.config, ref, hashes) for ref in files.index]) \
        if files.index else None
    if cands is None or cands.num_rows == 0:
        return None
    j = cands.join(q, "key_hash")
    b = np.asarray(j.column("begin").fill_null(I64_MIN))
    e = np.asarray(j.column("end").fill_null(I64_MAX))
    keep = (np.asarray(j.column("t_hi")) >= b) & (np.asarray(j.column("t_lo")) <= e)
    j = j.filter(pa.array(keep)).select(["topic", "key", "begin", "end", "phy"])
    j = j.group_by(["topic", "key", "begin", "end", "phy"], use_threads=False).aggregate([])
    segs = {s.base: s for s in files.commitlog}
    parts = check_candidates(store, segs, files.config.mappedFileSizeCommitLog, j)
    return pa.concat_tables(parts) if parts else None
