"""A tiny store end to end without Spark (storelib.runtime.localrun): encode, plan, write, commit and
publish, in two batches (the second continues the first's files in place), byte for byte
RocketMQ's small-roll store; then export, verify and a reader's answers. ``make check`` runs it,
so a broken write or commit stage shows in the inner loop, not only in the slow suite."""
from __future__ import annotations

import json
import os

from support import goldenlib
from conftest import golden_set

from storelib.table import manifest
from storelib.io import storage
from storelib.verify import driver as verify
from storelib.format.config import load_config
from storelib.table.export import export_store
from storelib.ingest.driver import run_ingest
from storelib.runtime.localrun import LocalSession
from storelib.format import paths

SMALL = goldenlib.SMALL_ROLL_CONFIG


def test_two_batches_in_process_give_rocketmq_bytes(tmp_path):
    g = golden_set("small-roll")
    lines = open(os.path.join(g, "messages.jsonl")).readlines()
    cfg = load_config(None, SMALL)
    store = str(tmp_path / "store")
    for k, (lo, hi) in enumerate(((0, 1700), (1700, len(lines)))):
        part = tmp_path / f"p{k}.jsonl"
        part.write_text("".join(lines[lo:hi]))
        out = run_ingest(LocalSession(), store, str(part), "jsonl", cfg, batch_id=f"p{k}", quiet=True)
        assert out["status"] == "committed" and out["messages"] == hi - lo
    assert goldenlib.compare(g, store) == []
    st = storage.Store(store)
    assert [b["batch_id"] for b in manifest.load_snapshot(st).batches] == ["p0", "p1"]
    assert not st.exists(paths.STAGING_DIR) and not st.exists(paths.LEASE_PATH)
    assert verify.verify_store(store, cfg, deep=True, threads=1).problems == []
    export_store(store, str(tmp_path / "out"), as_of_batch="p0", durable=False)
    assert verify.verify_store(str(tmp_path / "out"), cfg, deep=True, use_manifest=False, threads=1).problems == []
    from storelib.read.query import open_store
    r = open_store(store)
    queries = [json.loads(x) for x in open(os.path.join(g, "queries.jsonl"))]
    answers = open(os.path.join(g, "answers.jsonl"), encoding="utf-8").read().splitlines()
    for q, a in list(zip(queries, answers))[:200]:
        assert json.dumps(r.answer(q), ensure_ascii=False, separators=(",", ":")) == a, q


def test_store_times_past_year_9999_name_index_files_in_order(tmp_path):
    """RocketMQ stores a message at any store time (year 10000, 2^53 ms) and indexes it; index
    files begun there are named 1 ms after the previous one (a name spells a four-digit year), so
    batches commit and a reader finds every key."""
    import base64
    cfg = load_config(None, {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 40,
                             "maxHashSlotNum": 2, "maxIndexNum": 3})
    store = str(tmp_path / "store")
    times = [1_700_000_000_000, 253_402_300_800_000, 253_402_300_800_001, 2**53, 5, 2**53 + 7]
    names = []
    for k in range(3):
        part = tmp_path / f"p{k}.jsonl"
        part.write_text("".join(json.dumps({
            "topic": "t", "queue_id": 0, "flag": 0, "sys_flag": 0, "born_timestamp": 0, "store_timestamp": ts,
            "born_host": "10.0.0.1:1", "store_host": "10.0.0.2:2", "body_b64": base64.b64encode(b"x").decode(),
            "properties": [["KEYS", f"k{i}"]]}) + "\n" for i, ts in enumerate(times[2 * k:2 * k + 2], 2 * k)))
        out = run_ingest(LocalSession(), store, str(part), "jsonl", cfg, batch_id=f"p{k}", quiet=True)
        assert out["status"] == "committed"
    names = sorted(os.listdir(os.path.join(store, "index")))
    assert len(names) == 3 and all(len(n) == 17 for n in names)
    assert names[0] == "20231114221320000"
    from storelib.format import indexfile
    assert [indexfile.name_millis(n) for n in names[1:]] == [1_700_000_000_001, 1_700_000_000_002]
    from storelib.read.query import open_store
    r = open_store(store)
    for i in range(len(times)):
        assert [m["store_timestamp"] for m in r.find_by_key("t", f"k{i}").messages] == [times[i]]
    assert verify.verify_store(store, cfg, deep=True, threads=1).problems == []
