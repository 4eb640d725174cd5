"""Incremental batches, idempotent batch ids, queue assignment and broker defaults.

In-process: one local[2] SparkSession for the module; ``run_ingest`` is the same code the
spark-submit job runs. Every store is compared byte for byte (goldenlib.compare against the golden set, or
file trees against each other).
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from support import goldenlib
from conftest import golden_set, ROOT

from storelib.io import checksum, storage
from storelib.codec import messages as codec
from storelib.table import manifest
from storelib.ingest import topics as topics_mod
from storelib.format.config import load_config
from storelib.ingest.driver import run_ingest
from storelib.errors import BadInput, IngestError
from storelib.format import paths

SMALL = goldenlib.SMALL_ROLL_CONFIG
CFG = load_config(None, SMALL)
NO_TOPICS = topics_mod.Topics({}, 4)

# Cut points in small-roll (message index where a batch starts), from the golden data:
#  * 1000, 2000: inside a commitlog segment and inside an index file;
#  * 468: right after message 467, whose keys fill index file 3 exactly (1020 = 4 x 255 entries);
#  * 1513: right after message 1512 fills index file 12 exactly (3315 = 13 x 255); message 1513 has
#    no keys, yet it creates the (empty) next index file (docs/FORMAT.md §3.2 step 1);
#  * 321: message 320 is the last record of commitlog segment 6 (the next one rolls to a new file);
#  * 2380: right after message 2379 fills an index file (5100 = 20 x 255).
SCHEMES = {
    "inside-segment-and-index-file": (1000, 2000),
    "index-file-boundaries": (468, 1513),
    "segment-boundary": (321, 2380),
}


# ``spark``: the session-wide local[2] SparkSession of conftest.py


@pytest.fixture(scope="module")
def golden_lines():
    with open(os.path.join(golden_set("small-roll"), "messages.jsonl"), encoding="utf-8") as fh:
        return fh.readlines()


def write_lines(path, lines) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    return str(path)


def storecmp(store: str) -> list:
    """Differences from the small-roll golden store ([] = byte-identical)."""
    return goldenlib.compare(golden_set("small-roll"), store)


def store_tree(store: str, skip_meta: bool = True) -> dict:
    """rel path -> sha256 of every file (without _rocketlake/ unless asked)."""
    out = {}
    for d, _, files in os.walk(store):
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, store)
            if skip_meta and rel.startswith(paths.META_DIR):
                continue
            with open(p, "rb") as fh:
                out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


def check_manifest(store: str, batch_ids: list) -> manifest.Snapshot:
    """Committed batches in order, one live row per file, checksums match the bytes on disk."""
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    assert [b["batch_id"] for b in snap.batches] == batch_ids
    assert [b["batch_seq"] for b in snap.batches] == list(range(1, len(batch_ids) + 1))
    on_disk = {k for k in store_tree(store) if not k.startswith(("lock", "abort", "compaction"))}
    assert set(snap.files) == on_disk
    for path, r in snap.files.items():
        assert checksum.checksum_of_bytes(st.read(path, 0, r["valid_bytes"])) == r["checksum"], path
    assert not st.exists(paths.STAGING_DIR) and not st.exists(paths.LEASE_PATH)
    return snap


@pytest.mark.slow
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_any_split_into_three_batches_gives_the_golden_bytes(spark, golden_lines, tmp_path, scheme):
    a, b = SCHEMES[scheme]
    store = str(tmp_path / "store")
    ids = []
    for k, (lo, hi) in enumerate(((0, a), (a, b), (b, len(golden_lines)))):
        inp = write_lines(tmp_path / f"part{k}.jsonl", golden_lines[lo:hi])
        s = run_ingest(spark, store, inp, "jsonl", CFG, batch_id=f"b{k}", target_splits=3, quiet=True,
                       topics=NO_TOPICS)
        assert s["status"] == "committed" and s["messages"] == hi - lo
        ids.append(f"b{k}")
    diffs = storecmp(store)
    assert diffs == [], diffs[:20]
    snap = check_manifest(store, ids)
    assert snap.batch["total_messages"] == len(golden_lines)


def test_batch_ids_are_idempotent(spark, golden_lines, tmp_path):
    store = str(tmp_path / "store")
    first = write_lines(tmp_path / "first.jsonl", golden_lines[:200])
    other = write_lines(tmp_path / "other.jsonl", golden_lines[200:300])
    s1 = run_ingest(spark, store, first, "jsonl", CFG, quiet=True, topics=NO_TOPICS)
    assert s1["status"] == "committed" and s1["batch_id"].startswith("auto-")
    before = store_tree(store, skip_meta=False)
    # Same input, default id (derived from the input's identity): nothing to do, nothing touched.
    s2 = run_ingest(spark, store, first, "jsonl", CFG, quiet=True, topics=NO_TOPICS)
    assert s2["status"] == "already-committed" and s2["batch_id"] == s1["batch_id"]
    assert store_tree(store, skip_meta=False) == before
    # Explicit id reused with other input: a clear error, nothing touched.
    with pytest.raises(IngestError, match="already committed with different input"):
        run_ingest(spark, store, other, "jsonl", CFG, batch_id=s1["batch_id"], quiet=True, topics=NO_TOPICS)
    assert store_tree(store, skip_meta=False) == before
    # Bad ids are refused before anything happens.
    with pytest.raises(BadInput, match="invalid batch id"):
        run_ingest(spark, store, other, "jsonl", CFG, batch_id="a/b", quiet=True, topics=NO_TOPICS)
    s3 = run_ingest(spark, store, other, "jsonl", CFG, batch_id="second", quiet=True, topics=NO_TOPICS)
    assert s3["status"] == "committed" and s3["batch_seq"] == 2
    check_manifest(store, [s1["batch_id"], "second"])


def _strip(lines, fields) -> list:
    out = []
    for line in lines:
        d = json.loads(line)
        for f in fields:
            d.pop(f, None)
        out.append(json.dumps(d, ensure_ascii=False) + "\n")
    return out


def _with(lines, values: dict) -> list:
    """Lines with fields set per row: values = {field: [value per row]}."""
    out = []
    for i, line in enumerate(lines):
        d = json.loads(line)
        for f, vals in values.items():
            d[f] = vals[i]
        out.append(json.dumps(d, ensure_ascii=False) + "\n")
    return out


TOPICS_JSON = {"topicConfigTable": {
    "order_events": {"topicName": "order_events", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6},
    "user-login": {"topicName": "user-login", "readQueueNums": 2, "writeQueueNums": 5, "perm": 6},
}}


def _topics_file(tmp_path) -> str:
    p = tmp_path / "topics.json"
    p.write_text(json.dumps(TOPICS_JSON))
    return str(p)


@pytest.mark.slow
def test_round_robin_queues_continue_across_batches(spark, golden_lines, tmp_path, capsys):
    """Rows without queue_id: round robin per topic over its write queues, in input order, the
    position carried from batch to batch; the store equals one written from explicit queue ids."""
    lines = golden_lines[:420]
    topics_path = _topics_file(tmp_path)
    tcfg = topics_mod.Topics.load(topics_path, CFG.defaultTopicQueueNums)
    # The model: k-th message of topic T goes to queue k % writeQueueNums(T).
    seen: dict = {}
    expect = []
    for line in lines:
        t = json.loads(line)["topic"]
        expect.append(seen.get(t, 0) % tcfg.write_queue_nums(t))
        seen[t] = seen.get(t, 0) + 1
    explicit = write_lines(tmp_path / "explicit.jsonl", _with(lines, {"queue_id": expect}))
    implicit = _strip(lines, ["queue_id"])
    ref = str(tmp_path / "ref")
    run_ingest(spark, ref, explicit, "jsonl", CFG, batch_id="x", quiet=True, topics=tcfg)
    one = str(tmp_path / "one")
    run_ingest(spark, one, write_lines(tmp_path / "all.jsonl", implicit), "jsonl", CFG, batch_id="all",
               target_splits=3, topics=topics_path)
    assert "readQueueNums 2 < writeQueueNums 5" in capsys.readouterr().err
    three = str(tmp_path / "three")
    for k, (lo, hi) in enumerate(((0, 101), (101, 250), (250, len(lines)))):
        run_ingest(spark, three, write_lines(tmp_path / f"p{k}.jsonl", implicit[lo:hi]), "jsonl", CFG,
                   batch_id=f"p{k}", target_splits=2, quiet=True, topics=topics_path)
    assert store_tree(one) == store_tree(ref)
    assert store_tree(three) == store_tree(ref)
    snap = check_manifest(three, ["p0", "p1", "p2"])
    assert json.loads(snap.batch["detail"])["round_robin"] == seen


def test_queue_by_sharding_key_and_default_timestamps(spark, golden_lines, tmp_path):
    """--queue-by: abs(javaHash(value) % writeQueueNums) (SelectMessageQueueByHash); missing
    store_timestamp -> born_timestamp, missing both -> the batch default; missing hosts -> config."""
    lines = golden_lines[:150]
    rows = [json.loads(x) for x in lines]
    nq = 4
    hashes = codec.java_hash(__import__("pyarrow").array([r["born_host"] for r in rows]))
    expect_q = [abs(int(h) - int(nq * int(int(h) / nq))) for h in hashes]   # Java: sign of dividend, abs
    default_ts = 1717200000000
    exp_ts = [r["born_timestamp"] if i % 3 else default_ts for i, r in enumerate(rows)]
    explicit = _with(lines, {"queue_id": expect_q, "store_timestamp": exp_ts,
                             "born_timestamp": [r["born_timestamp"] if i % 3 else default_ts
                                                for i, r in enumerate(rows)]})
    ref = str(tmp_path / "ref")
    run_ingest(spark, ref, write_lines(tmp_path / "explicit.jsonl", explicit), "jsonl", CFG, batch_id="x",
               quiet=True, topics=NO_TOPICS)
    implicit = []
    for i, r in enumerate(rows):
        r = dict(r)
        r.pop("queue_id")
        r.pop("store_timestamp")
        if i % 3 == 0:
            r.pop("born_timestamp")
        implicit.append(json.dumps(r, ensure_ascii=False) + "\n")
    got = str(tmp_path / "got")
    run_ingest(spark, got, write_lines(tmp_path / "implicit.jsonl", implicit), "jsonl", CFG, batch_id="y",
               quiet=True, topics=NO_TOPICS, queue_by="born_host", store_timestamp=default_ts, target_splits=2)
    assert store_tree(got) == store_tree(ref)
    # A sharding key the row does not have is an input error naming the row; nothing is written.
    bad = str(tmp_path / "bad")
    from storelib.errors import InputError
    with pytest.raises(InputError, match="--queue-by NO_SUCH_PROPERTY"):
        run_ingest(spark, bad, write_lines(tmp_path / "implicit2.jsonl", implicit), "jsonl", CFG, batch_id="z",
                   quiet=True, topics=NO_TOPICS, queue_by="NO_SUCH_PROPERTY", store_timestamp=default_ts)
    assert not os.path.exists(bad)


def test_missing_store_timestamp_defaults_to_input_mtime(spark, golden_lines, tmp_path):
    rows = [json.loads(x) for x in golden_lines[:40]]
    for r in rows:
        r.pop("store_timestamp")
        r.pop("born_timestamp")
    inp = write_lines(tmp_path / "in.jsonl", [json.dumps(r) + "\n" for r in rows])
    os.utime(inp, ns=(1_700_000_000_123_000_000, 1_700_000_000_123_000_000))
    store = str(tmp_path / "store")
    run_ingest(spark, store, inp, "jsonl", CFG, batch_id="t", quiet=True, topics=NO_TOPICS)
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["min_store_ts"] == snap.batch["max_store_ts"] == 1_700_000_000_123


def test_topics_json_is_read_as_rocketmq_writes_it(tmp_path):
    t = topics_mod.Topics.load(os.path.join(ROOT, "conf", "topics.json"), 4)
    assert t.write_queue_nums("orders") == 4 and t.write_queue_nums("not-listed") == 4
    assert t.warnings() == []
    bad = tmp_path / "bad.json"
    bad.write_text('{"topics": []}')
    with pytest.raises(topics_mod.TopicsError, match="topicConfigTable"):
        topics_mod.Topics.load(str(bad), 4)
    assert topics_mod.Topics.load(_topics_file(tmp_path), 4).warnings()[0].startswith("topic 'user-login'")


def test_readers_of_the_previous_snapshot_keep_working(spark, golden_lines, tmp_path):
    """A batch rewrites the last segment / consume queue / index files in place (atomic rename);
    a reader of the previous snapshot trusts only what its manifest says is valid, so its answers
    do not change."""
    from storelib.read.query import StoreReader
    from storelib.table.storefiles import StoreFiles
    store = str(tmp_path / "store")
    run_ingest(spark, store, write_lines(tmp_path / "a.jsonl", golden_lines[:230]), "jsonl", CFG,
               batch_id="a", quiet=True, topics=NO_TOPICS)

    def answers():
        r = StoreReader(store, CFG, files=StoreFiles.from_snapshot(store, as_of_batch="a", config=CFG))
        out = {"max": r.get_max_phy_offset()}
        for t, q in [("order_events", 0), ("user-login", 0)]:
            out[f"{t}/{q}"] = (r.get_max_offset_in_queue(t, q), r.get_message("g", t, q, 0, 32))
        return json.dumps(out, default=str, sort_keys=True)

    before = answers()
    run_ingest(spark, store, write_lines(tmp_path / "b.jsonl", golden_lines[230:700]), "jsonl", CFG,
               batch_id="b", quiet=True, topics=NO_TOPICS)
    assert answers() == before
