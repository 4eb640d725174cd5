"""Ingest: one batch of messages -> RocketMQ store files + one Delta commit.

Stages (Spark only schedules; executors read the input and write the files themselves):

1. scan      one task per input split: read, validate, compute record sizes, queue counts and
             index entry counts. Per-message sizes go to staging (read back by the driver only
             for splits that straddle a segment boundary). Bad input stops here, before any
             store file is written.
2. plan      driver: ``sequencer.plan_batch`` places every message (commitlog offsets, rolls,
             queue offsets, index positions) from the split summaries.
3. segments  one task per commitlog segment: re-read its pieces of the input, encode, write the
             whole segment file to staging; emit consume-queue units and index entries keyed by
             the file they belong to.
4. files     after a shuffle of those (small) records: one task per consume-queue / index file
             builds and stages the whole file.
5. commit    driver: checkpoint file, manifest rows, conditional Delta commits (the switch),
             then publish (staged -> final names) and remove the staging directory.

Every task attempt writes to its own staging path and returns it; only the driver's commit
makes a file part of the store. A rerun of the same batch id after a crash starts over from
the committed state (or, if the commit happened, finishes publishing), so the bytes are the
same as an uninterrupted run.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import sys
import time
import uuid
import zlib
from dataclasses import asdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import checkpoint as ckpt
from . import codec, commitlog, consumequeue, indexfile, inputs, manifest, sequencer, storage
from .codec import InputError
from .config import ConfigError, StoreConfig
from .faults import fault

log = logging.getLogger("rocketlake.ingest")


class IngestError(RuntimeError):
    pass


class AlreadyCommitted(Exception):
    """The batch id is committed with the same input: nothing to do."""


# ---------------------------------------------------------------------------- progress
class Progress:
    def __init__(self, quiet: bool = False):
        self.t0 = time.time()
        self.quiet = quiet

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"[rocketlake {time.time() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- store state
def store_state(snap: manifest.Snapshot) -> sequencer.StoreState:
    if snap.batch is None:
        return sequencer.StoreState()
    b = snap.batch
    queue_next = {(q["topic"], q["queue_id"]): q["max_offset"] for q in (b["queue_offsets"] or [])}
    idx = snap.of_kind("index")
    tail = None
    if idx:
        last = idx[-1]
        header = json.loads(last["detail"])["header"]
        tail = sequencer.IndexTail(last["path"], header, header["index_count"] >= json.loads(b["config"])["maxIndexNum"])
    return sequencer.StoreState(next_phys=b["max_phy_offset"], queue_next=queue_next, index_tail=tail,
                                index_files=len(idx), messages=b["total_messages"])


def check_store_root(store: storage.Store, snap: manifest.Snapshot) -> None:
    """A store without our tables must not already hold RocketMQ files (import those instead)."""
    if snap.batch is not None:
        return
    for d in ("commitlog", "consumequeue", "index"):
        if store.list_files(d):
            raise IngestError(f"{store.uri} already holds RocketMQ files ({d}/) but no rocketlake manifest: "
                              f"adopt it with `jobs/ingest.py --store {store.uri} --from-store {store.uri}`")


def check_config(snap: manifest.Snapshot, config: StoreConfig) -> None:
    if snap.batch is None:
        return
    stored = json.loads(snap.batch["config"])
    mine = config.file_shaping()
    diff = {k: (stored.get(k), v) for k, v in mine.items() if stored.get(k) != v}
    if diff:
        raise ConfigError("configuration differs from the one this store was written with: "
                          + ", ".join(f"{k} store={a!r} given={b!r}" for k, (a, b) in diff.items()))


def input_fingerprint(path: str, fmt: str, splits: list) -> str:
    """Identity of the input: files, sizes and modification times (content hash for small files)."""
    h = hashlib.sha256(fmt.encode())
    for f in sorted({s.path for s in splits}):
        fs, p = storage.filesystem(f)
        info = fs.get_file_info(p)
        h.update(f"{f}\0{info.size}\0".encode())
        if info.size is not None and info.size <= (64 << 20):
            with fs.open_input_file(p) as fh:
                h.update(hashlib.sha256(fh.read()).digest())
        else:
            h.update(str(info.mtime_ns).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------- executor side
def _attempt_tag() -> str:
    try:
        from pyspark import TaskContext
        tc = TaskContext.get()
    except ImportError:
        tc = None
    if tc is None:
        return f"local-{uuid.uuid4().hex[:8]}"
    return f"s{tc.stageId()}-p{tc.partitionId()}-a{tc.attemptNumber()}-{uuid.uuid4().hex[:6]}"


def _queue_keys(pm: codec.PreparedMessages):
    """(codes, keys): per message an int code of (topic, queue_id), and the distinct keys."""
    tenc = pc.dictionary_encode(pm.topic)
    tidx = tenc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    combo = tidx * (2**32) + pm.queue_id.astype(np.int64)
    uniq, codes = np.unique(combo, return_inverse=True)
    topics = tenc.dictionary.to_pylist()
    keys = [(topics[int(u // 2**32)], int(u % 2**32)) for u in uniq]
    return codes.astype(np.int32), keys


def scan_split(ctx: dict, split_dict: dict) -> dict:
    """Stage 1 task: validate a split and summarize it; per-message detail goes to staging."""
    fault("scan-split")
    split = inputs.split_from_dict(split_dict)
    cfg = StoreConfig.from_json(ctx["config"])
    table = None
    try:
        table, label = inputs.read_split(split)
        pm = codec.prepare(table, cfg, label)
    except InputError as e:
        rows = table.num_rows if table is not None else getattr(e, "rows", None)
        return {"index": split.index, "errors": e.problems, "error_total": e.total, "rows": rows}
    codes, keys = _queue_keys(pm)
    qcode = np.where(pm.cq_eligible, codes, -1).astype(np.int32)
    counts = np.bincount(qcode[qcode >= 0], minlength=len(keys))
    entries = pm.index_counts.astype(np.int32)
    store = storage.Store(ctx["store"])
    buf = io.BytesIO()
    np.savez(buf, sizes=pm.sizes.astype(np.int64), qkey=qcode, entries=entries,
             qkeys=np.array(json.dumps(keys)))
    store.write_file(f"{ctx['staging']}/scan/split-{split.index:06d}.npz", [buf.getvalue()])
    with_entries = np.flatnonzero(entries > 0)
    cq_rows = np.flatnonzero(pm.cq_eligible)
    ts = pm.store_timestamp
    return {
        "index": split.index, "count": pm.n, "total_bytes": int(pm.sizes.sum()),
        "queue_counts": [[k[0], k[1], int(c)] for k, c in zip(keys, counts) if c],
        "entries": int(entries.sum()),
        "last_entry_row": int(with_entries[-1]) if len(with_entries) else -1,
        "first_store_ts": int(ts[0]) if pm.n else None,
        "last_store_ts": int(ts[-1]) if pm.n else 0,
        "last_cq_store_ts": int(ts[cq_rows[-1]]) if len(cq_rows) else None,
        "min_store_ts": int(ts.min()) if pm.n else None,
        "max_store_ts": int(ts.max()) if pm.n else None,
    }


def _sha256_chunks(chunks) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _route(key) -> str:
    return json.dumps(key)


def write_segment(ctx: dict, seg: dict):
    """Stage 3 task: encode and stage one whole commitlog segment; emit CQ units and index entries."""
    cfg = StoreConfig.from_json(ctx["config"])
    store = storage.Store(ctx["store"])
    splits = ctx["splits"]
    F = cfg.mappedFileSizeCommitLog
    U = cfg.cq_units_per_file
    idx_starts = np.asarray(ctx["index_entry_starts"], dtype=np.int64)
    pred_targets = {int(k): v for k, v in ctx["pred_targets"].items()}
    records = []
    cq_parts: dict = {}
    idx_parts: dict = {}
    stats = {"count": 0, "min_ts": None, "max_ts": None}
    cache = {}
    for piece in seg["pieces"]:
        si = piece["split"]
        if si not in cache:
            cache.clear()
            cache[si] = inputs.read_split(inputs.split_from_dict(splits[si]))
        table, label = cache[si]
        sub = table.slice(piece["row_start"], piece["row_end"] - piece["row_start"])
        pm = codec.prepare(sub, cfg, lambda i, b=piece["row_start"], lb=label: lb(b + i))
        ends = np.cumsum(pm.sizes)
        phys = piece["phys_start"] + ends - pm.sizes
        codes, keys = _queue_keys(pm)
        # Queue offsets: the piece's base per topic/queue + rank among its NOT/COMMIT messages.
        qoff = np.zeros(pm.n, dtype=np.int64)
        elig = np.flatnonzero(pm.cq_eligible)
        if len(elig):
            ec = codes[elig]
            order = np.argsort(ec, kind="stable")
            sorted_codes = ec[order]
            group_start = np.searchsorted(sorted_codes, sorted_codes, side="left")
            rank = np.empty(len(elig), dtype=np.int64)
            rank[order] = np.arange(len(elig)) - group_start
            qbase_by_key = {(t, q): o for t, q, o in piece["queue_base"]}
            base = np.asarray([qbase_by_key.get(k, 0) for k in keys], dtype=np.int64)
            qoff[elig] = base[ec] + rank
            for code in np.unique(ec):
                topic, qid = keys[code]
                sel = elig[ec == code]
                fidx = qoff[sel] // U
                for f in np.unique(fidx):
                    s2 = sel[fidx == f]
                    key = _route(["cq", topic, qid, int(f * U)])
                    cq_parts.setdefault(key, []).append(
                        {"qoff": qoff[s2], "phys": phys[s2], "size": pm.sizes[s2].astype(np.int32),
                         "tags": pm.tags_code[s2]})
        records.append(codec.encode(pm, phys, qoff, crc_property=cfg.enabledAppendPropCRC))
        # Index entries, routed to their index file by batch-global position.
        if len(pm.index_msg) or pred_targets:
            gpos = piece["entry_base"] + np.arange(len(pm.index_msg), dtype=np.int64)
            ords = np.searchsorted(idx_starts, gpos, side="right") - 1 if len(idx_starts) else gpos * 0
            eph = phys[pm.index_msg]
            ets = pm.store_timestamp[pm.index_msg]
            for o in np.unique(ords):
                sel = ords == o
                idx_parts.setdefault(_route(["idx", int(o)]), []).append(
                    {"pos": gpos[sel], "hash": pm.index_hash[sel], "phys": eph[sel], "ts": ets[sel]})
            if len(gpos):
                lo, hi = int(gpos[0]), int(gpos[-1])
                for gp, targets in pred_targets.items():
                    if lo <= gp <= hi:
                        k = gp - lo
                        for o in targets:
                            idx_parts.setdefault(_route(["idx", int(o)]), []).append(
                                {"pred": [int(eph[k]), int(ets[k])]})
        stats["count"] += pm.n
        if pm.n:
            mn, mx = int(pm.store_timestamp.min()), int(pm.store_timestamp.max())
            stats["min_ts"] = mn if stats["min_ts"] is None else min(stats["min_ts"], mn)
            stats["max_ts"] = mx if stats["max_ts"] is None else max(stats["max_ts"], mx)
    # The whole segment: kept prefix of an existing file, new records, BLANK if the next file follows.
    rel = commitlog.rel_path(seg["base_offset"])
    prefix = store.read(rel, 0, seg["start_pos"]) if seg["start_pos"] > 0 else None
    if prefix is not None and len(prefix) != seg["start_pos"]:
        raise IngestError(f"{rel}: expected {seg['start_pos']} committed bytes, found {len(prefix)}")
    chunks = commitlog.segment_chunks(prefix, records, seg["end_pos"], seg["close"], F)
    valid = sum(len(c) for c in chunks)
    staged = f"{ctx['staging']}/files/{_attempt_tag()}/{rel}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-segment-write"), F)
    fault("after-segment-write")
    first = seg["pieces"][0]["phys_start"] if seg["pieces"] else None
    result = {
        "kind": "commitlog", "path": rel, "staged_path": staged, "base_offset": seg["base_offset"],
        "file_size": F, "valid_bytes": valid, "count_new": stats["count"],
        "first_new_offset": first, "end_offset": seg["base_offset"] + seg["end_pos"],
        "min_ts": stats["min_ts"], "max_ts": stats["max_ts"], "checksum": _sha256_chunks(chunks),
        "kept_bytes": seg["start_pos"],
    }
    yield _route(["seg", seg["base_offset"]]), result
    for key, parts in cq_parts.items():
        yield key, {"units": _concat_parts(parts)}
    for key, parts in idx_parts.items():
        for p in parts:
            if "pred" in p:
                yield key, {"pred": p["pred"]}
        data = [p for p in parts if "pred" not in p]
        if data:
            yield key, {"entries": _concat_parts(data)}


def _faulty_chunks(chunks, point):
    """Yield chunks, passing the fault point halfway (a crash in the middle of a file write)."""
    half = len(chunks) // 2
    for i, c in enumerate(chunks):
        if i == half:
            fault(point)
        yield c


def _concat_parts(parts: list) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def write_files(ctx: dict, items):
    """Stage 4 task: build and stage whole consume-queue and index files from shuffled records."""
    cfg = StoreConfig.from_json(ctx["config"])
    store = storage.Store(ctx["store"])
    groups: dict = {}
    for key, value in items:
        groups.setdefault(key, []).append(value)
    tag = None
    for key, values in groups.items():
        kind = json.loads(key)[0]
        if kind == "seg":
            for v in values:
                yield v
            continue
        tag = tag or _attempt_tag()
        plan = next((v["plan"] for v in values if "plan" in v), None)
        if plan is None:
            raise IngestError(f"no plan for {key}")
        if kind == "cq":
            yield _write_cq_file(ctx, cfg, store, plan, [v["units"] for v in values if "units" in v], tag)
        else:
            preds = [v["pred"] for v in values if "pred" in v]
            yield _write_index_file(ctx, cfg, store, plan, [v["entries"] for v in values if "entries" in v],
                                    preds, tag)


def _write_cq_file(ctx, cfg, store, plan, parts, tag) -> dict:
    rel = consumequeue.rel_path(plan["topic"], plan["queue_id"], plan["file_start_unit"])
    if parts:
        u = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(u["qoff"], kind="stable")
        u = {k: v[order] for k, v in u.items()}
    else:
        u = {"qoff": np.zeros(0, np.int64), "phys": np.zeros(0, np.int64), "size": np.zeros(0, np.int32),
             "tags": np.zeros(0, np.int64)}
    expect = np.arange(plan["first_unit"], plan["first_unit"] + plan["count"], dtype=np.int64)
    if len(u["qoff"]) != plan["count"] or not np.array_equal(u["qoff"], expect):
        raise IngestError(f"{rel}: units {len(u['qoff'])} do not match the plan ({plan['count']} from "
                          f"{plan['first_unit']})")
    kept = plan["kept_units"] * 20
    prefix = store.read(rel, 0, kept) if kept else b""
    if len(prefix) != kept:
        raise IngestError(f"{rel}: expected {kept} committed bytes, found {len(prefix)}")
    body = consumequeue.encode_units(u["phys"], u["size"], u["tags"]).tobytes()
    chunks = [prefix, body]
    staged = f"{ctx['staging']}/files/{tag}/{rel}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.cq_file_size)
    prev = consumequeue.decode_units(prefix) if kept else None
    phys_all = np.concatenate([prev["phys"].astype(np.int64), u["phys"]]) if kept else u["phys"]
    return {
        "kind": "consumequeue", "path": rel, "staged_path": staged, "topic": plan["topic"],
        "queue_id": plan["queue_id"], "base_offset": plan["file_start_unit"] * 20,
        "file_size": cfg.cq_file_size, "valid_bytes": kept + len(body),
        "count": plan["kept_units"] + plan["count"],
        "min_offset": plan["file_start_unit"], "max_offset": plan["first_unit"] + plan["count"] - 1,
        "min_phys": int(phys_all.min()) if len(phys_all) else None,
        "max_phys": int(phys_all.max()) if len(phys_all) else None,
        "checksum": _sha256_chunks(chunks),
    }


def _write_index_file(ctx, cfg, store, plan, parts, preds, tag) -> dict:
    if plan["extend"]:
        rel = plan["extend"]
        head = store.read(rel, 0, indexfile.INDEX_HEADER_SIZE)
        hdr = indexfile.IndexHeader.from_bytes(head)
        valid = indexfile.entries_offset(cfg) + hdr.index_count * 20
        builder = indexfile.IndexFileBuilder.from_bytes(cfg, store.read(rel, 0, valid))
    else:
        rel = None
        if plan["inherit"]:
            header = indexfile.IndexHeader.inherited(plan["inherit"]["end_phy_offset"],
                                                     plan["inherit"]["end_timestamp"])
        elif plan["needs_pred"]:
            if not preds:
                raise IngestError(f"index file {plan['ordinal']}: the entry before it was not delivered")
            header = indexfile.IndexHeader.inherited(preds[0][0], preds[0][1])
        else:
            header = indexfile.IndexHeader()
        builder = indexfile.IndexFileBuilder(cfg, header)
    if parts:
        e = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(e["pos"], kind="stable")
        e = {k: v[order] for k, v in e.items()}
    else:
        e = {"pos": np.zeros(0, np.int64), "hash": np.zeros(0, np.int32), "phys": np.zeros(0, np.int64),
             "ts": np.zeros(0, np.int64)}
    expect = np.arange(plan["first_entry"], plan["first_entry"] + plan["count"], dtype=np.int64)
    if not np.array_equal(e["pos"], expect):
        raise IngestError(f"index file {plan['ordinal']}: {len(e['pos'])} entries, plan says {plan['count']}")
    builder.put_keys(e["hash"], e["phys"], e["ts"])
    chunks = builder.chunks()
    name = f"ordinal-{plan['ordinal']:06d}" if rel is None else rel.split("/")[-1]
    staged = f"{ctx['staging']}/files/{tag}/index/{name}"
    store.write_file(staged, _faulty_chunks(chunks, "mid-file-write"), cfg.index_file_size)
    return {
        "kind": "index", "path": rel, "ordinal": plan["ordinal"], "staged_path": staged,
        "file_size": cfg.index_file_size, "valid_bytes": builder.valid_bytes(),
        "count": builder.header.index_count - 1, "header": builder.header.to_dict(),
        "checksum": _sha256_chunks(chunks), "roll": plan["roll"],
    }


# ---------------------------------------------------------------------------- driver
def _partitioner(assign: dict):
    def part(key):
        return assign.get(key, zlib.crc32(key.encode()) % max(1, len(set(assign.values()))))
    return part


def _read_detail(store: storage.Store, staging: str, index: int) -> sequencer.SplitDetail:
    data = np.load(io.BytesIO(store.read(f"{staging}/scan/split-{index:06d}.npz")))
    keys = [tuple(k) for k in json.loads(str(data["qkeys"]))]
    return sequencer.SplitDetail(sizes=data["sizes"], qkey=data["qkey"], qkeys=keys, entries=data["entries"])


def run_ingest(spark, store_uri: str, input_path: str, fmt: str, config: StoreConfig,
               batch_id: str | None = None, target_splits: int = 0, quiet: bool = False,
               split_bytes: int = 128 << 20) -> dict:
    """Ingest one batch; returns the summary dict. Raises InputError/ConfigError/IngestError."""
    t0 = time.time()
    prog = Progress(quiet)
    store = storage.Store(store_uri)
    sc = spark.sparkContext
    splits = inputs.plan_splits(input_path, fmt, target_splits or sc.defaultParallelism, split_bytes)
    fingerprint = input_fingerprint(input_path, fmt, splits)
    batch_id = batch_id or f"auto-{fingerprint[:16]}"
    snap = manifest.load_snapshot(store)
    prior = [b for b in snap.batches if b["batch_id"] == batch_id]
    if prior:
        finish_pending_publish(store, snap)
        if prior[-1]["input_fingerprint"] != fingerprint:
            raise IngestError(f"batch id {batch_id!r} is already committed with different input "
                              f"(fingerprint {prior[-1]['input_fingerprint'][:16]}, this input {fingerprint[:16]})")
        prog.say(f"batch {batch_id} is already committed (seq {prior[-1]['batch_seq']}): nothing to do")
        return {"batch_id": batch_id, "status": "already-committed", "batch_seq": prior[-1]["batch_seq"],
                "messages": prior[-1]["messages"]}
    finish_pending_publish(store, snap)
    check_store_root(store, snap)
    check_config(snap, config)
    state = store_state(snap)
    staging = f"{manifest.STAGING_DIR}/{_safe(batch_id)}"
    store.delete(staging)  # leftovers of a dead attempt of this batch are never read
    ctx = {"store": store_uri, "config": config.to_json(), "staging": staging,
           "splits": [s.to_dict() for s in splits]}
    try:
        # 1. scan
        prog.say(f"scan: {len(splits)} input split(s) of {input_path} ({fmt})")
        bctx = sc.broadcast(ctx)
        scans = sc.parallelize([s.to_dict() for s in splits], max(1, len(splits))) \
            .map(lambda s: scan_split(bctx.value, s)).collect()
        scans.sort(key=lambda r: r["index"])
        problems, total = [], 0
        for r in scans:
            if "errors" in r:
                problems.extend(r["errors"])
                total += r["error_total"]
        if problems:
            rows = {r["index"]: r.get("count", r.get("rows")) for r in scans}
            raise InputError(inputs.resolve_line_labels(problems, splits, rows), total)
        fault("after-scan")
        summaries = [sequencer.SplitSummary(
            index=r["index"], count=r["count"], total_bytes=r["total_bytes"],
            queue_counts={(t, q): c for t, q, c in r["queue_counts"]}, entries=r["entries"],
            last_entry_row=r["last_entry_row"], last_store_ts=r["last_store_ts"],
            last_cq_store_ts=r["last_cq_store_ts"], min_store_ts=r["min_store_ts"],
            max_store_ts=r["max_store_ts"], first_store_ts=r["first_store_ts"]) for r in scans]
        n_msgs = sum(s.count for s in summaries)
        prog.say(f"scan done: {n_msgs} messages, {sum(s.total_bytes for s in summaries)} record bytes")
        # 2. plan
        plan = sequencer.plan_batch(state, summaries, lambda i: _read_detail(store, staging, i), config)
        fault("after-plan")
        prog.say(f"plan: {len(plan.segments)} commitlog segment(s), {len(plan.cq_files)} consume queue "
                 f"file(s), {len(plan.index_files)} index file(s)")
        results = []
        if plan.segments:
            ctx2 = dict(ctx, index_entry_starts=plan.index_entry_starts,
                        pred_targets={str(k): v for k, v in plan.pred_targets().items()})
            bctx2 = sc.broadcast(ctx2)
            seg_payloads = [_segment_payload(s) for s in plan.segments]
            markers = [(_route(["cq", f.topic, f.queue_id, f.file_start_unit]), {"plan": asdict(f)})
                       for f in plan.cq_files]
            markers += [(_route(["idx", f.ordinal]), {"plan": asdict(f)}) for f in plan.index_files]
            keys = [k for k, _ in markers] + [_route(["seg", s.base_offset]) for s in plan.segments]
            n_parts = max(1, min(len(keys), 4 * sc.defaultParallelism))
            # Big files first, spread round-robin: index files and segments weigh most.
            assign = {k: i % n_parts for i, k in enumerate(keys)}
            seg_rdd = sc.parallelize(seg_payloads, len(seg_payloads)) \
                .flatMap(lambda s: write_segment(bctx2.value, s))
            marker_rdd = sc.parallelize(markers, max(1, min(len(markers), sc.defaultParallelism)))
            prog.say(f"write: {len(seg_payloads)} segment task(s), then {n_parts} file task(s)")
            results = seg_rdd.union(marker_rdd).partitionBy(n_parts, _partitioner(assign)) \
                .mapPartitions(lambda it: write_files(bctx2.value, it)).collect()
            fault("after-segments-staged")
        fault("after-files-staged")
        # 5. commit
        summary = _commit(store, snap, state, plan, summaries, results, config, batch_id, fingerprint,
                          staging, t0, prog)
    except BaseException:
        # Nothing of this batch is visible; staged files of this attempt are removed (best effort;
        # a SIGKILL leaves them for the rerun, which deletes them before starting).
        try:
            if not _is_committed(store, batch_id):
                store.delete(staging)
                _remove_empty_meta(store)
        except Exception:  # noqa: BLE001
            pass
        raise
    return summary


def _safe(batch_id: str) -> str:
    if not batch_id or any(c in batch_id for c in "/\\\0") or batch_id in (".", ".."):
        raise IngestError(f"invalid batch id {batch_id!r}: no '/', '\\' or empty ids")
    return batch_id


def _is_committed(store, batch_id) -> bool:
    snap = manifest.load_snapshot(store)
    return any(b["batch_id"] == batch_id for b in snap.batches)


def _remove_empty_meta(store: storage.Store) -> None:
    """Leave no trace: drop _rocketlake/ (and the root) if a failed first batch created them."""
    if store.list_files(manifest.META_DIR):
        return
    store.delete(manifest.META_DIR)
    if store.local and os.path.isdir(store.root) and not os.listdir(store.root):
        os.rmdir(store.root)


def _segment_payload(s: sequencer.SegmentPlan) -> dict:
    return {"base_offset": s.base_offset, "start_pos": s.start_pos, "end_pos": s.end_pos, "close": s.close,
            "pieces": [{"split": p.split, "row_start": p.row_start, "row_end": p.row_end,
                        "phys_start": p.phys_start, "entry_base": p.entry_base,
                        "queue_base": [[k[0], k[1], v] for k, v in p.queue_base.items()]} for p in s.pieces]}


def _commit(store, snap, state, plan, summaries, results, config, batch_id, fingerprint, staging, t0, prog):
    seq = snap.batch_seq + 1
    now = manifest.now_ms()
    segs = [r for r in results if r["kind"] == "commitlog"]
    cqs = [r for r in results if r["kind"] == "consumequeue"]
    idxs = sorted((r for r in results if r["kind"] == "index"), key=lambda r: r["ordinal"])
    if len(segs) != len(plan.segments) or len(cqs) != len(plan.cq_files) or len(idxs) != len(plan.index_files):
        raise IngestError(f"incomplete write stage: {len(segs)}/{len(plan.segments)} segments, "
                          f"{len(cqs)}/{len(plan.cq_files)} consume queue files, "
                          f"{len(idxs)}/{len(plan.index_files)} index files")
    # Index file names: creation order, strictly increasing (RocketMQ loads them sorted by name).
    existing_idx = snap.of_kind("index")
    prev_ms = indexfile.name_millis(existing_idx[-1]["path"].split("/")[-1]) if existing_idx else 0
    prev_ms = prev_ms or 0
    first_ts = next((s.first_store_ts for s in summaries if s.count), None) or now
    for r in idxs:
        if r["path"] is None:
            h = r["header"]
            t = h["begin_timestamp"] if h["begin_timestamp"] > 0 else first_ts
            ms = max(prev_ms + 1, t)
            r["path"] = f"{indexfile.DIR}/{indexfile.file_name(ms)}"
            prev_ms = ms
    # Checkpoint file: last message, last consume-queue message, last rolled index file's end.
    prev_ck = ckpt.Checkpoint(snap.batch["physic_msg_timestamp"], snap.batch["logics_msg_timestamp"],
                              snap.batch["index_msg_timestamp"]) if snap.batch else ckpt.Checkpoint()
    nonempty = [s for s in summaries if s.count]
    physic = nonempty[-1].last_store_ts if nonempty else prev_ck.physic_msg_timestamp
    cq_last = [s.last_cq_store_ts for s in summaries if s.last_cq_store_ts is not None]
    logics = cq_last[-1] if cq_last else prev_ck.logics_msg_timestamp
    index_ts = prev_ck.index_msg_timestamp
    prev_header = state.index_tail.header if state.index_tail else None
    for r in idxs:
        if r["roll"] and prev_header is not None and prev_header["end_timestamp"] > 0:
            index_ts = prev_header["end_timestamp"]
        prev_header = r["header"]
    ck = ckpt.Checkpoint(physic, logics, index_ts)
    ck_bytes = ck.to_bytes()
    ck_staged = f"{staging}/files/driver/{ckpt.FILE_NAME}"
    store.write_file(ck_staged, [ck_bytes])
    # Manifest rows.
    rows = []

    def row(kind, path, staged, **kw):
        base = dict.fromkeys(manifest.MANIFEST_SCHEMA.names)
        base.update(batch_id=batch_id, batch_seq=seq, action="add", kind=kind, path=path, staged_path=staged,
                    committed_at=now)
        base.update(kw)
        rows.append(base)

    prev_seg = {r["path"]: r for r in snap.of_kind("commitlog")}
    for r in segs:
        old = prev_seg.get(r["path"])
        count = r["count_new"] + (old["count"] if old and r["kept_bytes"] else 0)
        min_off = old["min_offset"] if old and r["kept_bytes"] else r["first_new_offset"]
        mins = [x for x in (r["min_ts"], old["min_store_ts"] if old and r["kept_bytes"] else None) if x is not None]
        maxs = [x for x in (r["max_ts"], old["max_store_ts"] if old and r["kept_bytes"] else None) if x is not None]
        row("commitlog", r["path"], r["staged_path"], base_offset=r["base_offset"], file_size=r["file_size"],
            valid_bytes=r["valid_bytes"], count=count, min_offset=min_off,
            max_offset=r["end_offset"], min_store_ts=min(mins) if mins else None,
            max_store_ts=max(maxs) if maxs else None, checksum=r["checksum"])
    for r in cqs:
        row("consumequeue", r["path"], r["staged_path"], topic=r["topic"], queue_id=r["queue_id"],
            base_offset=r["base_offset"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=r["min_offset"], max_offset=r["max_offset"],
            checksum=r["checksum"], detail=manifest.dumps({"min_phys": r["min_phys"], "max_phys": r["max_phys"]}))
    for r in idxs:
        h = r["header"]
        row("index", r["path"], r["staged_path"], file_size=r["file_size"], valid_bytes=r["valid_bytes"],
            count=r["count"], min_offset=h["begin_phy_offset"], max_offset=h["end_phy_offset"],
            min_store_ts=h["begin_timestamp"], max_store_ts=h["end_timestamp"], checksum=r["checksum"],
            detail=manifest.dumps({"header": h}))
    row("checkpoint", ckpt.FILE_NAME, ck_staged, file_size=ckpt.FILE_SIZE, valid_bytes=ckpt.FILE_SIZE, count=0,
        checksum=hashlib.sha256(ck_bytes).hexdigest(), detail=manifest.dumps(ck.to_dict()))
    wall = int((time.time() - t0) * 1000)
    mins = [s.min_store_ts for s in summaries if s.min_store_ts is not None]
    maxs = [s.max_store_ts for s in summaries if s.max_store_ts is not None]
    if snap.batch:
        mins += [snap.batch["min_store_ts"]] if snap.batch["min_store_ts"] is not None else []
        maxs += [snap.batch["max_store_ts"]] if snap.batch["max_store_ts"] is not None else []
    checkpoint_row = {
        "batch_id": batch_id, "batch_seq": seq, "operation": "ingest", "committed_at": now,
        "input_fingerprint": fingerprint, "messages": plan.messages, "bytes": plan.total_bytes,
        "index_entries": plan.entries, "total_messages": state.messages + plan.messages,
        "min_phy_offset": snap.batch["min_phy_offset"] if snap.batch else 0,
        "max_phy_offset": plan.next_phys,
        "queue_offsets": [{"topic": t, "queue_id": q, "max_offset": o}
                          for (t, q), o in sorted(plan.queue_next.items())],
        "physic_msg_timestamp": ck.physic_msg_timestamp, "logics_msg_timestamp": ck.logics_msg_timestamp,
        "index_msg_timestamp": ck.index_msg_timestamp,
        "min_store_ts": min(mins) if mins else None, "max_store_ts": max(maxs) if maxs else None,
        "wall_time_ms": wall, "config": manifest.dumps(config.file_shaping()),
        "detail": manifest.dumps({"segments": len(segs), "consumequeue_files": len(cqs), "index_files": len(idxs)}),
    }
    fault("before-delta-commit")
    manifest.commit(store, snap.versions, rows, checkpoint_row, fault=fault)
    prog.say(f"committed batch {batch_id} as seq {seq}")
    fault("after-commit-before-publish")
    publish(store, rows)
    fault("after-publish-before-cleanup")
    store.delete(staging)
    elapsed = time.time() - t0
    summary = {
        "batch_id": batch_id, "batch_seq": seq, "status": "committed", "messages": plan.messages,
        "record_bytes": plan.total_bytes, "index_entries": plan.entries,
        "segments": len(segs), "consumequeue_files": len(cqs), "index_files": len(idxs),
        "max_phy_offset": plan.next_phys, "seconds": round(elapsed, 3),
        "msgs_per_s": round(plan.messages / elapsed, 1) if elapsed > 0 else None,
    }
    prog.say(f"done: {summary['messages']} messages, {summary['segments']} segment(s), "
             f"{summary['record_bytes']} bytes in {elapsed:.1f}s ({summary['msgs_per_s']} msgs/s)")
    return summary


def publish(store: storage.Store, rows: list) -> None:
    """Move staged files to their final names (redo-safe: a missing staged file is already moved)."""
    for r in rows:
        if r["action"] != "add" or not r["staged_path"]:
            continue
        if store.exists(r["staged_path"]):
            store.publish(r["staged_path"], r["path"])
            fault("mid-publish")


def finish_pending_publish(store: storage.Store, snap: manifest.Snapshot) -> None:
    """A crash after a commit and before its publish finished: redo the publish, drop staging."""
    if snap.batch is None:
        return
    staging = f"{manifest.STAGING_DIR}/{snap.batch['batch_id']}"
    if not store.exists(staging):
        return
    rows = [r for r in snap.files.values() if r["batch_id"] == snap.batch["batch_id"]]
    publish(store, rows)
    store.delete(staging)
