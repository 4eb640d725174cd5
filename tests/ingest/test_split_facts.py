"""The planner's chunked view of a straddling split (storelib.ingest.split_facts.ChunkedDetail) places
every message exactly as the whole-split computation it replaces: the split's staged facts
loaded whole, its round-robin rows placed by ``encode_stage.final_queues``, cumulative sums over
every row (``WholeSplit`` below keeps that computation as the reference)."""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict

import numpy as np
from hypothesis import given, HealthCheck, settings, strategies as st

from conftest import golden_set
from support.longrun import LONG
from storelib.ingest import encode as encode_stage, inputs, sequencer, split_facts, topics as topics_mod
from storelib.io import storage
from storelib.format.config import StoreConfig
from storelib.ingest.context import EncodeContext
from storelib.ingest.split_staging import LocalStaging


class WholeSplit:
    """The reference: the planner's questions answered from all rows of a split at once, with
    the formulas the sequencer used before the planner file existed."""

    def __init__(self, sizes, qcode, keys, entries):
        self.cum = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
        self.ent_cum = np.concatenate([[0], np.cumsum(np.asarray(entries, np.int64))])
        self.qcode, self.keys = np.asarray(qcode), keys

    def bytes_before(self, row):
        return int(self.cum[row])

    def entries_before(self, row):
        return int(self.ent_cum[row])

    def fit_end(self, row, limit):
        return row + int(np.searchsorted(self.cum[row + 1:] - self.cum[row], limit, side="right"))

    def queue_counts_before(self, row):
        q = self.qcode[:row]
        before = np.bincount(q[q >= 0], minlength=len(self.keys))
        return {self.keys[i]: int(before[i]) for i in np.flatnonzero(before)}

    def queue_base_at(self, row, queue_next):
        """The queue offsets a piece starting at ``row`` gets: every topic/queue with a unit at or
        after ``row``, at its base plus the units before ``row``."""
        before = np.bincount(self.qcode[:row][self.qcode[:row] >= 0], minlength=len(self.keys))
        present = np.unique(self.qcode[row:][self.qcode[row:] >= 0])
        return {self.keys[i]: queue_next.get(self.keys[i], 0) + int(before[i]) for i in present}


def _summary(index, d: WholeSplit, entries):
    q = d.qcode[d.qcode >= 0]
    counts = {d.keys[i]: int(c) for i, c in enumerate(np.bincount(q, minlength=len(d.keys))) if c}
    with_entries = np.flatnonzero(np.asarray(entries) > 0)
    return sequencer.SplitSummary(index=index, count=len(d.cum) - 1, total_bytes=int(d.cum[-1]),
                                  queue_counts=counts, entries=int(d.ent_cum[-1]),
                                  last_entry_row=int(with_entries[-1]) if len(with_entries) else -1)


def _check_pieces(plan, whole: dict, state: sequencer.StoreState, summaries):
    """Every piece's queue base equals the reference formula at its first row."""
    queue_next = dict(state.queue_next)
    bases = {}
    for s in summaries:
        bases[s.index] = dict(queue_next)
        for k, c in s.queue_counts.items():
            queue_next[k] = queue_next.get(k, 0) + c
    for seg in plan.segments:
        for p in seg.pieces:
            assert p.queue_base == whole[p.split].queue_base_at(p.row_start, bases[p.split])


@st.composite
def splits(draw):
    n = draw(st.integers(1, 90))
    sizes = draw(st.lists(st.integers(92, 600), min_size=n, max_size=n))
    entries = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    nkeys = draw(st.integers(0, 3))
    rr_nq = draw(st.lists(st.integers(1, 5), max_size=3))
    # per row: ("key", i) | ("rr", topic) ; and whether it takes a queue offset (NOT/COMMIT)
    kinds = [("key", i) for i in range(nkeys)] + [("rr", t) for t in range(len(rr_nq))]
    if not kinds:
        kinds = [("key", 0)]
        nkeys = 1
    rows = draw(st.lists(st.sampled_from(kinds), min_size=n, max_size=n))
    eligible = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    starts = draw(st.lists(st.integers(0, 9), min_size=len(rr_nq), max_size=len(rr_nq)))
    chunk = draw(st.integers(1, 12))
    room = draw(st.integers(0, 3000))
    return sizes, entries, nkeys, rr_nq, rows, eligible, starts, chunk, room


@settings(max_examples=200 if LONG else 100, deadline=None, suppress_health_check=[HealthCheck.too_slow])   # make long: all
@given(splits())
def test_chunked_detail_equals_whole_split(tmp_path_factory, w):
    sizes, entries, nkeys, rr_nq, rows, eligible, starts, chunk, room = w
    n = len(sizes)
    keys = [(f"rr{i % 2}", i) for i in range(nkeys)]        # may also be a round-robin topic's queue
    rr_topics = [f"rr{t}" for t in range(len(rr_nq))]
    rr_topic = np.asarray([v if kind == "rr" else -1 for kind, v in rows], np.int32)
    rr_rank = np.zeros(n, np.int64)
    for t in range(len(rr_nq)):
        sel = np.flatnonzero(rr_topic == t)
        rr_rank[sel] = np.arange(len(sel))
    qkey = np.asarray([(-2 if kind == "rr" else v) if e else -1 for (kind, v), e in zip(rows, eligible)], np.int32)
    meta = {"qkeys": keys, "qkey": qkey, "queue_id": np.zeros(n, np.int32),
            "rr_topic": rr_topic, "rr_rank": rr_rank, "rr_topics": rr_topics}
    tcfg = topics_mod.Topics.from_dict({"default": 4, "topics": {t: [q, q, 6] for t, q in zip(rr_topics, rr_nq)}})
    rr_start = dict(zip(rr_topics, starts))
    qcode, final_keys, _ = encode_stage.final_queues(meta, rr_start, tcfg)
    whole = WholeSplit(sizes, qcode, final_keys, entries)

    root = str(tmp_path_factory.mktemp("facts"))
    staged = LocalStaging(root)
    pcode = split_facts.planner_codes(qkey, nkeys, rr_topic, rr_rank, rr_nq)
    staged.write_file("s.plan", split_facts.planner_file(np.asarray(sizes, np.int32), np.asarray(entries, np.int32),
                                                         pcode, keys, rr_topics, rr_nq, chunk_rows=chunk))
    chunked = split_facts.ChunkedDetail(staged, "s.plan", rr_start)
    for r in range(n + 1):
        assert chunked.bytes_before(r) == whole.bytes_before(r)
        assert chunked.entries_before(r) == whole.entries_before(r)
        assert chunked.queue_counts_before(r) == whole.queue_counts_before(r)
        for limit in (0, 91, 92, room, 10**9):
            assert chunked.fit_end(r, limit) == whole.fit_end(r, limit), (r, limit)

    # The plan of a batch that starts `room` bytes before a boundary, in files of 1000 bytes.
    cfg = StoreConfig(mappedFileSizeCommitLog=1000, maxIndexNum=5, maxHashSlotNum=7)
    state = sequencer.StoreState(next_phys=3000 - min(room, 999), queue_next={final_keys[0]: 7} if final_keys else {})
    summ = [_summary(0, whole, entries)]
    ref = sequencer.plan_batch(state, summ, lambda i: whole, cfg)
    got = sequencer.plan_batch(state, summ, lambda i: chunked, cfg)
    assert asdict(got) == asdict(ref)
    _check_pieces(got, {0: whole}, state, summ)


def _round_robin_input(tmp_path) -> str:
    """small-roll's messages (big bodies, PREPARED/ROLLBACK rows), with the queue id left to
    round robin for half of the topics."""
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).read().splitlines()
    topics = sorted({json.loads(x)["topic"] for x in lines})
    rr = set(topics[::2])
    out = []
    for line in lines:
        m = json.loads(line)
        if m["topic"] in rr:
            del m["queue_id"]
        out.append(json.dumps(m))
    path = tmp_path / "rr.jsonl"
    path.write_text("\n".join(out) + "\n")
    return str(path)


def test_encoded_splits_plan_as_the_whole_split_computation(tmp_path, monkeypatch):
    """Encoded splits of round-robin topics with PREPARED/ROLLBACK rows, in commitlog files of
    64 KiB (each split straddles several boundaries), planner chunks of 37 rows: the plan equals
    the one from each split's whole staged facts, continuing a store mid-file."""
    monkeypatch.setattr(split_facts, "CHUNK_ROWS", 37)
    cfg = StoreConfig(mappedFileSizeCommitLog=65536, maxIndexNum=256, maxHashSlotNum=64)
    src = _round_robin_input(tmp_path)
    splits = inputs.plan_splits(src, "jsonl", 3, 1 << 20)
    tcfg = topics_mod.Topics.from_dict({"default": 4, "topics": {"order_events": [5, 5, 6], "user-login": [3, 3, 6]}})
    ctx = EncodeContext(store=str(tmp_path / "store"), config=cfg, topics=tcfg, staging="_rocketlake/staging/t/a",
                        splits=tuple(s.to_dict() for s in splits), default_store_ts=1)
    st_ = storage.Store(ctx.store)
    scans = [encode_stage.encode_split(ctx, s.to_dict()) for s in splits]
    rr_starts, _ = encode_stage.round_robin_starts(scans, {"order_events": 3, "user-login": 7})
    summaries = encode_stage.split_summaries(scans, tcfg, rr_starts)
    whole = {}
    for r in scans:
        meta = encode_stage.load_split_facts(st_, r["meta_path"])
        qcode, keys, _ = encode_stage.final_queues(meta, rr_starts[r["index"]], tcfg)
        whole[r["index"]] = WholeSplit(meta["sizes"], qcode, keys, meta["entries"])
        rr_prepared = (meta["rr_topic"] >= 0) & (meta["qkey"] == -1)
        assert rr_prepared.any() and (meta["qkey"] == -2).any() and (meta["qkey"] == -1).sum() > rr_prepared.sum()
    paths = {r["index"]: r["plan_path"] for r in scans}
    state = sequencer.StoreState(next_phys=3 * 65536 + 40000, queue_next={("order_events", 1): 11, ("user-login", 2): 5})
    ref = sequencer.plan_batch(state, summaries, whole.__getitem__, cfg)
    got = sequencer.plan_batch(state, summaries,
                               lambda i: encode_stage.read_detail(st_, paths[i], rr_starts.get(i)), cfg)
    assert asdict(got) == asdict(ref)
    _check_pieces(got, whole, state, summaries)
    pieces = Counter(p.split for seg in got.segments for p in seg.pieces)
    assert len(pieces) == len(splits) >= 3 and min(pieces.values()) >= 3      # several cuts in every split
