"""The driver at the size of a real cluster, by simulation (issue 40 item 4): no store bytes written.

The driver's own code runs on synthetic split facts: the sequencer (``sequencer.plan_batch``, with
a closed-form stand-in for the planner file of a split that straddles a segment boundary), the
commit's planning and manifest rows (``commit._written_files`` / ``_name_index_files`` /
``_checkpoint`` / ``_file_rows`` / ``_checkpoint_row``, from the facts the write tasks would
return), the two conditional Delta commits (``manifest.commit``, real deltalake, on a local
directory: every ``_rocketlake`` byte is real) and the snapshot the next batch opens
(``snapshots.open_snapshot`` and ``rowcheck.check_snapshot`` as the ingest driver calls them, and
``driver.store_state``; the checkpoints table's part of that read timed on its own too), and the
snapshot cache's refresh after
the commit (``snapcache.refresh``, from the snapshot the commit returns). Not run: the executors'
encode and write stages (they write the bytes) and publish.

Layout: ``--topics`` x ``--queues`` queues, messages spread evenly over them; input splits grouped
by topic (a split holds ``topics / splits`` topics, or a topic holds ``splits / topics`` splits),
records of ``--record-bytes`` each, ``--keys`` index keys a message, RocketMQ's default file sizes
(1 GiB segments, 300,000-unit consume queues, 20M-entry index files).

Two measurements, each in a fresh process (peak RSS is the process's):

* ``one``: one batch of ``--messages`` in ``--splits`` splits into an empty store: seconds to plan,
  to build the rows, to commit; driver peak RSS; rows.
* ``store``: a store of ``--messages`` built by ``--batches`` equal batches (10,000 in the issue),
  of which the first ``--real`` are run and committed for real and the rest modelled from them:
  each batch's rows and Delta log bytes are those of a real one (the batches are alike), and the
  snapshot load is timed at several history lengths and fitted (linear in the rows ever
  written: ``load_snapshot`` reads every manifest row of every commit).

    python bench/cluster_sim.py                       # the issue's grid (long), JSON to bench/results/
    python bench/cluster_sim.py --smoke               # seconds: the smallest case of each (make test)
    python bench/cluster_sim.py one --messages 1e9 --splits 1e4
    python bench/cluster_sim.py compare --baseline /work/main --messages 1e10 --real 4
                                 # ``store`` on this tree and on another checkout's storelib, alternating
    python bench/cluster_sim.py store --messages 1e10 --splits 1e3 --real 4 --history 3000 --progress
                                 # the real batches after 3,000 commits of history (``_history``)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# ``--tree DIR``: the storelib of another checkout (a baseline), else this one's
TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv[:-1] else ROOT
sys.path.insert(0, TREE)

HEX = "ab" * 32


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Sampler:
    """The process's RSS sampled every 20 ms by a thread: the highest of each step (``step``
    starts one), whatever the steps before it reached (``ru_maxrss`` only ever grows)."""

    def __init__(self):
        import threading
        self.peaks: dict = {}
        self.name = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                with open("/proc/self/statm") as fh:
                    mb = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            except OSError:
                return
            if self.name is not None:
                self.peaks[self.name] = max(self.peaks.get(self.name, 0.0), mb)
            time.sleep(0.02)

    def step(self, name):
        self.name = name

    def take(self) -> dict:
        out, self.peaks = {k: round(v) for k, v in self.peaks.items()}, {}
        return out


SAMPLER = None


class _Detail:
    """What the sequencer asks of a straddling split (``split_facts.ChunkedDetail``'s questions),
    in closed form: equal records, ``keys`` entries each, message i in the split's queue i % K."""

    def __init__(self, count: int, rec: int, keys: int, qkeys: list):
        self.count, self.rec, self.keys, self.qkeys = count, rec, keys, qkeys

    def bytes_before(self, row: int) -> int:
        return row * self.rec

    def entries_before(self, row: int) -> int:
        return row * self.keys

    def fit_end(self, row: int, limit: int) -> int:
        return min(self.count, row + max(0, limit) // self.rec)

    def queue_counts_before(self, row: int) -> dict:
        K = len(self.qkeys)
        return {k: row // K + (1 if j < row % K else 0) for j, k in enumerate(self.qkeys)
                if row // K + (1 if j < row % K else 0)}


def _summaries(n: int, splits: int, topics: int, queues: int, rec: int, keys: int, batch: int, t0: int):
    """A batch of ``n`` messages in ``splits`` splits (grouped by topic); split facts and details."""
    from storelib.ingest.sequencer import SplitSummary
    out, details = [], {}
    per = n // splits
    for i in range(splits):
        count = per + (1 if i < n - per * splits else 0)
        if splits <= topics:
            tlo, thi = i * topics // splits, (i + 1) * topics // splits
            qkeys = [(f"t{t:05d}", q) for t in range(tlo, thi) for q in range(queues)]
        else:
            qkeys = [(f"t{i * topics // splits:05d}", q) for q in range(queues)]
        # a batch smaller than its queues touches only some: rotate which, batch by batch
        if count < len(qkeys):
            off = (batch * count) % len(qkeys)
            qkeys = (qkeys[off:] + qkeys[:off])[:count]
        K = max(1, len(qkeys))
        qc = {k: count // K + (1 if j < count % K else 0) for j, k in enumerate(qkeys) if count // K + (j < count % K)}
        ts = t0 + i
        out.append(SplitSummary(index=i, count=count, total_bytes=count * rec, queue_counts=qc, entries=count * keys,
                                last_entry_row=count - 1 if keys else -1, last_store_ts=ts, last_cq_store_ts=ts,
                                last_wait_store_ts=ts, min_store_ts=ts, max_store_ts=ts, first_store_ts=ts))
        details[i] = _Detail(count, rec, keys, qkeys)
    return out, details


def _facts(plan, state, cfg, rec: int, keys: int, ts: int) -> list:
    """The facts the write tasks would return for ``plan`` (sizes and counts exact, digests fake)."""
    from storelib.format import commitlog, consumequeue, indexfile
    from storelib.io import checksum
    B = checksum.BLOCK_SIZE
    out = []
    for s in plan.segments:
        valid = s.end_pos + (commitlog.MIN_BLANK if s.close else 0)
        new = sum(p.row_end - p.row_start for p in s.pieces)
        first = s.pieces[0].phys_start if s.pieces else s.base_offset + s.start_pos
        out.append({"kind": "commitlog", "path": s.rel_path, "staged_path": None, "base_offset": s.base_offset,
                    "file_size": cfg.mappedFileSizeCommitLog, "valid_bytes": valid, "count_new": new,
                    "kept_bytes": s.start_pos, "first_new_offset": first, "end_offset": s.base_offset + s.end_pos,
                    "min_ts": ts, "max_ts": ts, "checksum": HEX, "blocks": [HEX] * -(-valid // B)})
    for f in plan.cq_files:
        units = f.kept_units + f.count
        out.append({"kind": "consumequeue", "path": consumequeue.rel_path(f.topic, f.queue_id, f.file_start_unit),
                    "staged_path": None, "topic": f.topic, "queue_id": f.queue_id,
                    "base_offset": f.file_start_unit * consumequeue.UNIT_SIZE, "file_size": cfg.cq_file_size,
                    "valid_bytes": units * consumequeue.UNIT_SIZE, "count": units, "min_offset": f.file_start_unit,
                    "max_offset": f.first_unit + f.count, "checksum": HEX, "blocks": [HEX],
                    "min_phys": 0, "max_phys": plan.next_phys})
    prev = state.index_tail.header if state.index_tail else None
    for f in plan.index_files:
        used = (prev["index_count"] - 1) if (f.extend and prev) else 0
        h = indexfile.IndexHeader(ts, ts, 0, plan.next_phys, min(cfg.maxHashSlotNum, used + f.count),
                                  used + f.count + 1)._asdict()
        out.append({"kind": "index", "ordinal": f.ordinal, "path": f.extend, "staged_path": None,
                    "file_size": cfg.index_file_size, "valid_bytes": indexfile.entry_offset(h["index_count"], cfg),
                    "count": used + f.count, "header": h, "checksum": HEX, "roll": f.roll,
                    "blocks": [HEX] * -(-indexfile.entry_offset(h["index_count"], cfg) // B)})
        prev = h
    return out


def _batch(store, snap, cfg, n, splits, topics, queues, rec, keys, k) -> dict:
    """One batch through the driver's code; seconds per step and its rows."""
    from storelib.format import checkpoint as ckpt
    from storelib.ingest import commit, driver, sequencer
    from storelib.table import manifest
    t = {}
    _step("plan")
    c0 = time.perf_counter()
    state = driver.store_state(snap)
    summaries, details = _summaries(n, splits, topics, queues, rec, keys, k, 1_800_000_000_000 + k * 1000)
    t["summaries_s"] = time.perf_counter() - c0
    c0 = time.perf_counter()
    plan = sequencer.plan_batch(state, summaries, details.__getitem__, cfg)
    t["plan_s"] = time.perf_counter() - c0
    peak = {"plan": _rss_mb()}
    c0 = time.perf_counter()
    results = _facts(plan, state, cfg, rec, keys, 1_800_000_000_000 + k * 1000)
    t["facts_s"] = time.perf_counter() - c0
    _step("rows")
    c0 = time.perf_counter()
    seq = snap.batch_seq + 1
    now = manifest.now_ms() + k
    segs, cqs, idxs = commit._written_files(plan, results)
    idxs = commit._name_index_files(snap, summaries, idxs, now)
    ck = commit._checkpoint(snap, state, summaries, idxs, cqs if cfg.line_5_5 else None)
    key = dict(batch_id=f"b{k}", batch_seq=seq, committed_at=now, attempt_id="sim")
    rows = commit._file_rows(snap, segs, cqs, idxs, key)
    rows.append(manifest.file_row("checkpoint", ckpt.FILE_NAME, staged_path=None, file_size=ckpt.FILE_SIZE,
                                  valid_bytes=4096, count=0, checksum=HEX, detail=manifest.dumps(ck.to_dict()), **key))
    staged = commit.StagedBatch(snap, state, plan, summaries, results, f"b{k}", HEX, "sim", attempt="sim")
    counts = (len(segs), len(cqs), len(idxs))
    del segs, cqs, idxs                      # (as ``commit_batch``: their rows say it all)
    ck_row = commit._checkpoint_row(staged, ck, cfg, time.time(), key,
                                    {"segments": counts[0], "consumequeue_files": counts[1], "index_files": counts[2]})
    t["rows_s"] = time.perf_counter() - c0
    peak["rows"] = _rss_mb()
    _step("commit")
    c0 = time.perf_counter()
    committed = manifest.commit(store, snap.versions, rows, ck_row, durable=False)
    t["commit_s"] = time.perf_counter() - c0
    peak["commit"] = _rss_mb()
    _step("refresh")
    c0 = time.perf_counter()
    t["refresh_wrote"] = _refresh(store, committed)
    getattr(commit, "let_go", lambda *s: None)(snap, committed)     # (as ``commit_batch``; a tree without it)
    t["refresh_s"] = time.perf_counter() - c0
    peak["refresh"] = _rss_mb()
    t["peak_mb_by_step"] = peak        # the process's peak RSS after each step: where it rose
    t.update(rows=len(rows), segments=counts[0], cq_files=counts[1], index_files=counts[2],
             queue_offsets=len(ck_row["queue_offsets"] or []),
             detail_bytes=sum(len(r["detail"] or "") for r in rows))
    return t


def _step(name: str) -> None:
    if SAMPLER is not None:
        SAMPLER.step(name)


def _open_next(store):
    """The snapshot the next batch opens, as the ingest driver opens and checks it (a tree without
    the writer's read of the checkpoints table reads every batch's ``queue_offsets``)."""
    import inspect
    from storelib.table import rowcheck, snapshots
    lean = "queue_offsets" in inspect.signature(snapshots.open_snapshot).parameters
    snap = snapshots.open_snapshot(store, history=True, **({"queue_offsets": False} if lean else {}))
    rowcheck.check_snapshot(snap)
    return snap


def _checkpoints_read_s(store) -> float:
    """Seconds of the checkpoints table's part of that read (as the driver's open reads it)."""
    from storelib.format.paths import CHECKPOINTS_DIR
    from storelib.table import manifest
    try:
        from storelib.table.tableread import batch_rows_lean as lean
    except ImportError:                       # (a tree that reads every batch's queue_offsets)
        lean = None
    c0 = time.perf_counter()
    manifest._table_rows(store, CHECKPOINTS_DIR, *([lean] if lean else []))
    return time.perf_counter() - c0


def _refresh(store, committed) -> bool:
    """The snapshot cache's refresh as the commit's tail runs it (a tree whose ``refresh`` takes
    no snapshot reads the tables)."""
    import inspect
    from storelib.table import snapcache
    if len(inspect.signature(snapcache.refresh).parameters) > 1:
        return bool(snapcache.refresh(store, committed))
    return bool(snapcache.refresh(store))


def _log_bytes(root: str) -> dict:
    """Per table: bytes on disk (data files of every version, and the log), the log's bytes,
    files and Delta checkpoints, and the data files the latest version names."""
    out = {}
    for table in ("manifest", "checkpoints"):
        d = os.path.join(root, "_rocketlake", table)
        total = logs = log_files = checkpoints = 0
        for dp, _, fs in os.walk(d):
            for f in fs:
                sz = os.path.getsize(os.path.join(dp, f))
                total += sz
                if "_delta_log" in dp:
                    logs, log_files = logs + sz, log_files + 1
                    checkpoints += ".checkpoint." in f
        out[table] = {"bytes": total, "log_bytes": logs, "log_files": log_files, "checkpoints": checkpoints,
                      "data_files": _data_files(d)}
    return out


def _data_files(table: str):
    try:
        from deltalake import DeltaTable
        dt = DeltaTable(table)
        n = len(dt.file_uris())
        dt = None
        return n
    except Exception:  # noqa: BLE001 - no table yet
        return None


def _history(store, snap, batches: int, progress: bool, batch_bytes: int = 0) -> tuple:
    """``batches`` commits through the real commit code (``manifest.commit``: both conditional
    Delta commits, the compaction and the checkpoints table's merge when due, a Delta checkpoint
    every 100 versions), each a batch that changes no file: it writes one manifest row (the
    RocketMQ checkpoint file's, its facts unchanged) and a checkpoint row. What a long history
    leaves in the tables (their versions, log files, Delta checkpoints, one checkpoint row and one
    data file per batch, the compactions and merges it triggers) at a fraction of the cost of
    real batches; what it does not leave: the rows real batches would have written (a compacted
    manifest table holds the live rows and those since, whatever the history) and the queue
    offsets of their checkpoint rows (the lean read skips them). Each records ``batch_bytes`` of
    records, a real batch's, so that the manifest merge gets the share a real batch gives it. The
    snapshot cache is refreshed once, from the last committed snapshot (a writer's tail refreshes
    it after every commit; a refresh at 10^10 messages costs tens of seconds, so not after each of
    these). Returns the last committed snapshot and the seconds each commit took."""
    from storelib.table import manifest
    secs = []
    for _ in range(batches):
        prev = snap.batch
        seq = snap.batch_seq + 1
        row = dict(snap.files["checkpoint"])
        now = manifest.now_ms()
        key = dict(batch_id=f"h{seq}", batch_seq=seq, committed_at=now)
        row.update(key, attempt_id=None, staged_path=None)
        ck = manifest.checkpoint_row_after(dict(prev), **key, operation="ingest", messages=0, bytes=batch_bytes,
                                           index_entries=0, queue_offsets=[], wall_time_ms=0,
                                           input_fingerprint=f"h{seq}")
        c0 = time.perf_counter()
        snap = manifest.commit(store, snap.versions, [row], ck, durable=False)
        secs.append(time.perf_counter() - c0)
        if progress and seq % 100 == 0:
            print(f"history batch {seq}: commit {secs[-1]:.3f} s (median of the last 100 "
                  f"{sorted(secs[-100:])[len(secs[-100:]) // 2]:.3f} s)", file=sys.stderr, flush=True)
    _refresh(store, snap)
    return snap, secs


def _open(root: str, segment_bytes: int = 1 << 30):
    from storelib.format.config import StoreConfig
    from storelib.io import storage
    return storage.Store(root), StoreConfig(flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=segment_bytes)


def run_one(a) -> dict:
    from storelib.table import manifest
    root = tempfile.mkdtemp(prefix="clustersim-")
    try:
        store, cfg = _open(root, a.segment_bytes)
        snap = manifest.load_snapshot(store)
        r = _batch(store, snap, cfg, a.messages, a.splits, a.topics, a.queues, a.record_bytes, a.keys, 0)
        c0 = time.perf_counter()
        manifest.load_snapshot(store)
        r["load_s"] = time.perf_counter() - c0
        r.update(_log_bytes(root), rss_mb=_rss_mb())
        return r
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_store(a) -> dict:
    """``a.real`` real batches of messages / batches each; the rest of ``a.batches`` modelled."""
    from storelib.ingest import driver
    n = a.messages // a.batches
    root = tempfile.mkdtemp(prefix="clustersim-")
    per, loads = [], []
    history: dict = {}
    try:
        store, cfg = _open(root, a.segment_bytes)
        snap = _open_next(store)
        for k in range(a.real):
            if k == 1 and getattr(a, "history", 0):
                c0 = time.perf_counter()
                snap, secs = _history(store, snap, a.history, getattr(a, "progress", False), n * a.record_bytes)
                history = {"batches": a.history, "seconds": time.perf_counter() - c0,
                           "commit_s_by_hundred": [sorted(secs[i:i + 100])[len(secs[i:i + 100]) // 2]
                                                   for i in range(0, len(secs), 100)],
                           "rss_mb": _rss_mb()}
                c0 = time.perf_counter()
                snap = _open_next(store)
                history["open_s"] = time.perf_counter() - c0
                history["log"] = _log_bytes(root)
            r = _batch(store, snap, cfg, n, a.splits, a.topics, a.queues, a.record_bytes, a.keys, k)
            # the driver holds one snapshot: ``run_ingest`` opens it and lets it go when it returns
            # (also a stream sink's, a micro-batch a call); holding the previous one through the
            # next open was this bench's own peak
            held, snap = (snap if getattr(a, "hold", False) else None), None
            _step("open")
            c0 = time.perf_counter()
            snap = _open_next(store)
            driver.store_state(snap)
            r["load_s"] = time.perf_counter() - c0
            r["peak_mb_by_step"]["open"] = _rss_mb()
            r["rss_mb_in_step"] = SAMPLER.take() if SAMPLER else {}
            del held
            r["checkpoints_read_s"] = _checkpoints_read_s(store)
            # the rows the load read (a compacted table: the live ones and those since), the live files
            r["table_rows"] = getattr(snap.versions, "rows", None)
            r["batches"] = len(snap.batches)
            r["rss_mb"] = _rss_mb()
            r["live_files"] = len(snap.files)
            marker = getattr(snap.versions.latest, "compaction", None)
            r["compacted"] = marker is not None and marker.detail["through_seq"] == snap.batch_seq
            r["driver_s"] = r["plan_s"] + r["rows_s"] + r["commit_s"] + r["refresh_s"] + r["load_s"]
            loads.append((sum(p["rows"] for p in per) + r["rows"], r["load_s"]))
            per.append(r)
            if getattr(a, "progress", False):
                print(f"batch {k + 1}: peak RSS after each step {r['peak_mb_by_step']} MB, "
                      f"highest RSS in each {r['rss_mb_in_step']} MB", file=sys.stderr)
                print(f"batch {k + 1}: plan+rows+commit {r['plan_s'] + r['rows_s'] + r['commit_s']:.2f} s, "
                      f"refresh {r['refresh_s']:.2f} s, load "
                      f"{r['load_s']:.2f} s of {r['table_rows']} rows ({r['live_files']} live)"
                      + (", compacted" if r["compacted"] else ""), file=sys.stderr, flush=True)
        logs = _log_bytes(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"per_batch": per, "loads": loads, "log": logs, "rss_mb": _rss_mb(), "live_files": len(snap.files),
            "batch_messages": n, "history": history}


def model(res: dict, batches: int) -> dict:
    """Extrapolate a ``store`` run to ``batches`` batches (the docstring's model)."""
    import numpy as np
    per = res["per_batch"][1:] or res["per_batch"]     # the first batch creates the tables
    rows = float(np.median([p["rows"] for p in per]))
    step = {k: float(np.median([p[k] for p in per])) for k in ("summaries_s", "plan_s", "facts_s", "rows_s", "commit_s")}
    compacting = any(p.get("compacted") for p in res["per_batch"])
    if compacting:
        # a compacted table: the load reads the rows at the time (the live ones and those since the
        # last compaction, at most twice the live ones and a batch's), whatever the history
        x = np.array([p["table_rows"] for p in res["per_batch"]], float)
        read_after = 2 * (res["live_files"] + 1) + rows
    else:
        # append-only: the load reads every row ever written
        x = np.array([rows_ever for rows_ever, _ in res["loads"]], float)
        read_after = rows * batches
    y = np.array([secs for _, secs in res["loads"]], float)
    slope, icpt = (np.polyfit(x, y, 1) if len(x) > 1 and np.ptp(x) > 0 else (y[-1] / max(x[-1], 1), 0.0))
    total_rows = rows * batches
    real = len(res["per_batch"])
    mf_log = res["log"]["manifest"]["bytes"] / real
    ck_log = res["log"]["checkpoints"]["bytes"] / real
    rss_per_row = max(0.0, (res["rss_mb"] - 150) / max(x.max(), 1))
    load_after = float(icpt + slope * read_after)
    return {"rows_per_batch": rows, "manifest_rows_after": total_rows, "compacting": compacting,
            "rows_read_after": read_after,
            # a compacted table's data files are the live rows' (older files stay until a vacuum)
            "manifest_bytes_after": mf_log * batches, "checkpoints_bytes_after": ck_log * batches,
            "load_s_after": load_after, "load_s_per_million_rows": float(slope * 1e6),
            "driver_mb_after": 150 + rss_per_row * read_after, "mb_per_thousand_rows": rss_per_row * 1e3,
            # the driver's own steps (the split facts and the write tasks' facts are the executors')
            "plan_commit_s": step["plan_s"] + step["rows_s"] + step["commit_s"],
            # a batch opens the snapshot, and refreshes the snapshot cache after its commit: two loads
            "batch_s_after": step["plan_s"] + step["rows_s"] + step["commit_s"] + 2 * load_after,
            **step}


def _child(mode: str, tree: str = ROOT, **kw) -> dict:
    args = [sys.executable, os.path.abspath(__file__), mode, "--json", "--tree", tree]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}"] + ([str(v)] if v != "" else [])
    r = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tree))
    if r.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def grid(smoke: bool, real: int) -> dict:
    msgs = [10**6] if smoke else [10**8, 10**9, 10**10]
    splits = [100] if smoke else [10**3, 10**4, 10**5]
    topics = 100 if smoke else 10**4
    out = {"load_avg_start": os.getloadavg()[0], "one": [], "store": []}
    for m in msgs:
        for s in splits:
            r = _child("one", messages=m, splits=s, topics=topics)
            r.update(messages=m, splits=s)
            out["one"].append(r)
            print(f"one batch of {m:.0e} in {s:.0e} splits: plan {r['plan_s']:.2f} s, rows {r['rows_s']:.2f} s, commit "
                  f"{r['commit_s']:.2f} s, {r['rows']} rows, rss {r['rss_mb']:.0f} MB", flush=True)
    for m in msgs:
        s = splits[0] if smoke else 10**3
        r = _child("store", messages=m, splits=s, topics=topics, batches=100 if smoke else 10_000, real=real)
        r["model"] = model(r, 100 if smoke else 10_000)
        r.update(messages=m, splits=s)
        out["store"].append(r)
        mo = r["model"]
        print(f"store of {m:.0e} in {100 if smoke else 10_000} batches ({real} real): {mo['rows_per_batch']:.0f} rows a batch, "
              f"plan+commit {mo['plan_commit_s']:.2f} s, after all: {mo['manifest_rows_after']:.3g} manifest rows, "
              f"{mo['manifest_bytes_after'] / 1e9:.2f} GB manifest table, snapshot load {mo['load_s_after']:.0f} s, "
              f"a batch {mo['batch_s_after']:.0f} s, "
              f"driver ~{mo['driver_mb_after']:.0f} MB", flush=True)
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def compare(a) -> dict:
    """``store`` on ``a.baseline``'s storelib and on this tree's, ``a.rounds`` times, alternating
    (the same machine and load for both: compare the two, not the seconds)."""
    out: dict = {"baseline": a.baseline, "tree": ROOT, "runs": []}
    for i in range(a.rounds):
        for name, tree in (("baseline", a.baseline), ("tree", ROOT)):
            load0 = os.getloadavg()[0]
            r = _child("store", tree, messages=a.messages, splits=a.splits, topics=a.topics, queues=a.queues,
                       batches=a.batches, real=a.real, segment_bytes=a.segment_bytes, history=a.history,
                       **({"hold": ""} if a.hold else {}))
            r.update(which=name, round=i, load_avg=[load0, os.getloadavg()[0]])
            out["runs"].append(r)
            for k, p in enumerate(r["per_batch"]):
                print(f"{name} round {i} batch {k + 1}: highest RSS in each step {p.get('rss_mb_in_step')} MB", flush=True)
                print(f"{name} round {i} batch {k + 1}: {p['rows']} rows, plan+rows+commit "
                      f"{p['plan_s'] + p['rows_s'] + p['commit_s']:.2f} s, refresh {p['refresh_s']:.2f} s, next load "
                      f"{p['load_s']:.2f} s ({p['table_rows']} manifest rows; checkpoints table "
                      f"{p['checkpoints_read_s']:.2f} s)", flush=True)
            h = r.get("history") or {}
            if h:
                print(f"{name} round {i}: {h['batches']} history batches in {h['seconds']:.0f} s (a commit, median by "
                      f"hundreds: {', '.join(f'{x:.3f}' for x in h['commit_s_by_hundred'])} s), then an open "
                      f"{h['open_s']:.2f} s; tables then: {json.dumps(h['log'])}", flush=True)
            print(f"{name} round {i}: peak RSS {r['rss_mb']:.0f} MB, load average {load0:.1f}-{os.getloadavg()[0]:.1f}; "
                  f"tables at the end: {json.dumps(r['log'])}", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", choices=["one", "store", "grid", "compare"], default="grid")
    ap.add_argument("--messages", type=float, default=1e6)
    ap.add_argument("--splits", type=float, default=100)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--record-bytes", type=int, default=512)
    ap.add_argument("--keys", type=int, default=1)
    ap.add_argument("--segment-bytes", type=int, default=1 << 30)
    ap.add_argument("--batches", type=int, default=10_000)
    ap.add_argument("--real", type=int, default=6)
    ap.add_argument("--hold", action="store_true", help="store: hold the previous snapshot through the next open "
                    "(as this bench did before 2026-11-29 afternoon)")
    ap.add_argument("--history", type=int, default=0,
                    help="store: commits of a batch that changes no file after the first real batch (_history)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--progress", action="store_true", help="a line per real batch on stderr")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tree", default=ROOT, help="the checkout whose storelib runs (read at import)")
    ap.add_argument("--baseline", help="compare: the other checkout (e.g. main's worktree)")
    ap.add_argument("--rounds", type=int, default=1, help="compare: runs of each tree, alternating")
    ap.add_argument("--out", help="compare: the JSON file to write")
    a = ap.parse_args(argv)
    a.messages, a.splits = int(a.messages), int(a.splits)
    if a.mode == "one":
        res = run_one(a)
    elif a.mode == "store":
        global SAMPLER
        SAMPLER = _Sampler()
        res = run_store(a)
    elif a.mode == "compare":
        if not a.baseline:
            ap.error("compare needs --baseline DIR")
        res = compare(a)
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(res, fh, indent=1)
        return 0
    else:
        res = grid(a.smoke, 3 if a.smoke else a.real)
        if not a.smoke:
            os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
            path = os.path.join(HERE, "results", time.strftime("cluster-sim-%Y-%m-%dT%H%M%S.json", time.gmtime()))
            with open(path, "w") as fh:
                json.dump(res, fh, indent=1)
            print(path)
        return 0
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
