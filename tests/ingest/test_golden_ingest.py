"""End to end: `spark-submit jobs/ingest.py` reproduces RocketMQ's own stores byte for byte.

The input is split into at least 7 partitions, so segment and index-file boundaries fall inside
partitions (the sequencer has to place rolls inside a split) and the files are assembled from
several tasks' output. Both golden sets are checked with goldenlib.compare. Bad input
is rejected before any byte is written, with a message naming the row and the field.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from support import goldenlib
from support.opshelp import tree_digest
from conftest import ROOT, golden_set

from storelib.ingest import inputs
from storelib.table import manifest
from storelib.io import storage
from storelib.format import paths

PY = sys.executable
SUBMIT = os.path.join(os.path.dirname(PY), "spark-submit")


def spark_submit(*args, env_extra=None, timeout=600):
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    env.update(env_extra or {})
    cmd = [SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def golden_properties(set_dir: str, tmp_path) -> str:
    cfg = json.load(open(os.path.join(set_dir, "config.json")))["messageStoreConfig"]
    path = tmp_path / "store.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items() if k != "flushDiskType"))
    return str(path)


def storecmp(set_dir: str, store: str) -> list:
    """Differences from the set's golden store ([] = byte-identical)."""
    return goldenlib.compare(set_dir, store)


@pytest.mark.slow
def test_small_roll_jsonl_seven_partitions(tmp_path):
    g = golden_set("small-roll")
    store = str(tmp_path / "store")
    summary = tmp_path / "summary.json"
    r = spark_submit("jobs/ingest.py", "--store", store, "--input", os.path.join(g, "messages.jsonl"),
                     "--format", "jsonl", "--config", golden_properties(g, tmp_path), "--partitions", "7",
                     "--json-summary", str(summary))
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = storecmp(g, store)
    assert diffs == [], diffs[:20]
    s = json.loads(summary.read_text())
    assert s["messages"] == 3000 and s["segments"] == 63 and s["index_files"] == 25
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["messages"] == 3000
    assert len(snap.of_kind("commitlog")) == 63 and len(snap.of_kind("index")) == 25
    assert len(snap.of_kind("consumequeue")) == 142
    # The rest of the root stays a plain RocketMQ storePathRootDir (its ``lock``: the empty one the
    # ingest held the broker lock on, storelib.io.brokerlock).
    assert sorted(os.listdir(store)) == ["_rocketlake", "checkpoint", "commitlog", "consumequeue", "index", "lock"]
    assert os.path.getsize(os.path.join(store, paths.LOCK_FILE)) == 0
    assert not os.path.exists(os.path.join(store, paths.STAGING_DIR, s["batch_id"]))


@pytest.mark.slow
def test_default_size_parquet_seven_partitions(tmp_path):
    """1 GiB segment, 420 MB index file, 6 MB consume queues; Parquet input with 8 row groups."""
    g = golden_set("default-size")
    table = inputs.jsonl_to_table(os.path.join(g, "messages.jsonl.gz"))
    src = tmp_path / "input"
    src.mkdir()
    pq.write_table(inputs.canonical_to_parquet_input(table.slice(0, 12000)), src / "part-0.parquet",
                   row_group_size=2500)
    pq.write_table(inputs.canonical_to_parquet_input(table.slice(12000)), src / "part-1.parquet",
                   row_group_size=3000)
    store = str(tmp_path / "store")
    r = spark_submit("jobs/ingest.py", "--store", store, "--input", str(src), "--format", "parquet",
                     "--config", golden_properties(g, tmp_path), "--partitions", "8")
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = storecmp(g, store)
    assert diffs == [], diffs[:20]
    assert "msgs_per_s=" in r.stdout


# (line of bad.jsonl, field named in the error, text expected in the error, how to break the row)
BAD_ROWS = [
    (7, "topic", "V1", lambda m: m.update(topic="t" * 40 + "\u00e9" * 60)),
    (45, "born_host", "cannot parse host", lambda m: m.update(born_host="10.0.0.300:1")),
    (88, "sys_flag", "0x10", lambda m: m.update(sys_flag=m["sys_flag"] | 0x10)),
    (120, "queue_id", "negative", lambda m: m.update(queue_id=-1)),
]


@pytest.mark.slow
def test_bad_input_rejected_before_any_write(tmp_path):
    """Bad rows in several splits are all reported by line and field; the store is untouched."""
    g = golden_set("small-roll")
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").read().splitlines()
    props = golden_properties(g, tmp_path)
    store = str(tmp_path / "store")
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines[:200]) + "\n", encoding="utf-8")
    r = spark_submit("jobs/ingest.py", "--store", store, "--input", str(good), "--config", props,
                     "--batch-id", "first")
    assert r.returncode == 0, r.stderr[-2000:]
    before = tree_digest(store)
    batch = lines[200:350]
    for line_no, _, _, mutate in BAD_ROWS:
        m = json.loads(batch[line_no - 1])
        mutate(m)
        batch[line_no - 1] = json.dumps(m, ensure_ascii=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(batch) + "\n", encoding="utf-8")
    r = spark_submit("jobs/ingest.py", "--store", store, "--input", str(bad), "--config", props,
                     "--batch-id", "second", "--partitions", "3")
    assert r.returncode == 2, r.stderr[-3000:]
    # spark-submit merges the Python driver's stderr into its stdout.
    out = r.stdout + r.stderr
    problems = sorted((ln.strip() for ln in out.splitlines() if "bad.jsonl line" in ln),
                      key=lambda ln: int(ln.split(" line ")[1].split(":")[0]))
    assert len(problems) == len(BAD_ROWS), out[-3000:]
    for (line_no, field, needle, _), got in zip(BAD_ROWS, problems):
        assert got.startswith(f"{bad} line {line_no}: field '{field}'") and needle in got, got
    assert tree_digest(store) == before, "a rejected batch changed the store"


def test_missing_input_is_a_clear_error(tmp_path):
    from storelib.errors import InputError
    with pytest.raises(InputError, match="not found"):
        inputs.plan_splits(str(tmp_path / "nope.jsonl"), "jsonl")


def _encode_context(tmp_path, crc: bool, n_splits: int):
    """An encode stage's context over small-roll's messages in ``n_splits`` splits, its splits and store."""
    from storelib.ingest import topics
    from storelib.ingest.context import EncodeContext
    from storelib.format.config import StoreConfig
    src = os.path.join(golden_set("small-roll"), "messages.jsonl")
    splits = inputs.plan_splits(src, "jsonl", n_splits, 1 << 20)
    ctx = EncodeContext(store=str(tmp_path / "store"), config=StoreConfig(enabledAppendPropCRC=crc),
                        topics=topics.Topics.default(), staging="_rocketlake/staging/t/a",
                        splits=tuple(s.to_dict() for s in splits), default_store_ts=1)
    return ctx, splits, storage.Store(ctx.store)


@pytest.mark.parametrize("crc", [False, True])
def test_reencoded_rows_equal_staged_records(tmp_path, crc):
    """A segment-writer attempt that finds a split's staged records deleted (an earlier attempt
    wrote them into their segment) encodes the rows again from the input: the same bytes."""
    import numpy as np
    from storelib.ingest import encode as encode_stage
    ctx, splits, st = _encode_context(tmp_path, crc, 3)
    for s in splits:
        r = encode_stage.encode_split(ctx, s.to_dict())
        staged = np.frombuffer(st.read(r["records_path"]), np.uint8)
        sizes = encode_stage.load_split_facts(st, r["meta_path"])["sizes"].astype(np.int64)
        ends = np.cumsum(sizes)
        for r0, r1 in [(0, r["count"]), (1, r["count"] // 2), (r["count"] // 3, r["count"])]:
            again = encode_stage.reencode_rows(ctx, s.index, r0, r1)
            assert again.tobytes() == staged[ends[r0] - sizes[r0]:ends[r1 - 1]].tobytes()


@pytest.mark.parametrize("crc", [False, True])
def test_staged_records_written_in_place_are_the_encoded_bytes(tmp_path, monkeypatch, crc):
    """An encode task encodes each run of records where the direct write takes it from
    (``direct_io.placed``, room for the unaligned tail before it): with runs of a few rows,
    whatever their sizes against the 4 KiB blocks, the staged file holds every record as one
    ``codec.encode`` of the split gives it."""
    import numpy as np
    from storelib.ingest import encode as encode_stage
    from storelib.io import direct_io
    monkeypatch.setattr(encode_stage, "RUN_ROWS", 37)
    monkeypatch.setattr(direct_io, "MIN_PLACED", direct_io.ALIGN)
    in_place = []
    real = direct_io._Writer._write_placed
    monkeypatch.setattr(direct_io._Writer, "_write_placed", lambda self, d: in_place.append(len(d)) or real(self, d))
    ctx, splits, st = _encode_context(tmp_path, crc, 2)
    for s in splits:
        r = encode_stage.encode_split(ctx, s.to_dict())
        whole = encode_stage.reencode_rows(ctx, s.index, 0, r["count"])
        assert np.frombuffer(st.read(r["records_path"]), np.uint8).tobytes() == whole.tobytes()
    probe = tmp_path / "probe"
    if direct_io.write_direct(str(probe), [b"x" * (2 * direct_io.BUFFER_SIZE)]) is not None:
        assert len(in_place) > 2 * len(splits)       # (where the file system takes O_DIRECT)


def test_run_chunks_are_allocated_on_the_task_thread(tmp_path, monkeypatch):
    """Each run's chunk (``direct_io.placed``) comes from the encode task's own thread, whose malloc
    heap keeps freed memory for the next run, not from a pool thread (whose arena may map and zero
    every ~80 MB chunk afresh: docs/PERFORMANCE.md, the encode stage's CPU); the bytes are the same."""
    import threading
    import numpy as np
    from storelib.ingest import encode as encode_stage
    from storelib.io import direct_io
    monkeypatch.setattr(encode_stage, "RUN_ROWS", 29)
    monkeypatch.setenv("ROCKETLAKE_WRITER_THREADS", "2")
    threads = []
    real = direct_io.placed
    monkeypatch.setattr(direct_io, "placed", lambda n, pos: threads.append(threading.get_ident()) or real(n, pos))
    ctx, splits, st = _encode_context(tmp_path, False, 2)
    for s in splits:
        r = encode_stage.encode_split(ctx, s.to_dict())
        whole = encode_stage.reencode_rows(ctx, s.index, 0, r["count"])
        assert np.frombuffer(st.read(r["records_path"]), np.uint8).tobytes() == whole.tobytes()
    assert len(threads) > 2 * len(splits) and set(threads) == {threading.get_ident()}


def test_an_encode_task_reads_its_next_split_while_the_last_one_is_staged(tmp_path, monkeypatch):
    """``encode_splits``: split k+1 is read while split k's records are still being written (the
    task's core is not idle while they reach the disk: docs/PERFORMANCE.md); the summaries and
    every staged byte are those of the splits encoded one by one, the run chunks still come from
    the task's thread, and a failure while staging fails the task."""
    import threading
    import numpy as np
    from storelib.ingest import encode as encode_stage
    from storelib.io import direct_io
    ctx, splits, st = _encode_context(tmp_path, False, 3)
    alone = [encode_stage.encode_split(ctx, s.to_dict()) for s in splits]
    read_next = threading.Event()
    reads, placed = [], []
    real_read, real_write, real_placed = inputs.read_split, storage.Store.write_file, direct_io.placed

    def read(split):
        reads.append(split.index)
        if split.index == 1:
            read_next.set()
        return real_read(split)

    def write(self, path, data, **kw):
        if path.endswith(".records") and "split-000000-" in path:
            assert read_next.wait(30), "split 1 was not read while split 0's records were staged"
        return real_write(self, path, data, **kw)

    monkeypatch.setattr(inputs, "read_split", read)
    monkeypatch.setattr(storage.Store, "write_file", write)
    monkeypatch.setattr(direct_io, "placed", lambda n, pos: placed.append(threading.get_ident()) or real_placed(n, pos))
    together = encode_stage.encode_splits(ctx, [s.to_dict() for s in splits])
    assert reads == list(range(len(splits))) and len(splits) > 2 and set(placed) == {threading.get_ident()}
    drop = ("meta_path", "plan_path", "records_path")
    assert [{k: v for k, v in r.items() if k not in drop} for r in together] == \
        [{k: v for k, v in r.items() if k not in drop} for r in alone]
    for a, b in zip(alone, together):
        for k in drop:
            assert np.array_equal(np.frombuffer(st.read(a[k]), np.uint8), np.frombuffer(st.read(b[k]), np.uint8))

    def broken(self, path, data, **kw):
        if path.endswith(".records"):
            raise OSError("disk full")
        return real_write(self, path, data, **kw)
    monkeypatch.setattr(storage.Store, "write_file", broken)
    with pytest.raises(OSError, match="disk full"):
        encode_stage.encode_splits(ctx, [s.to_dict() for s in splits])
