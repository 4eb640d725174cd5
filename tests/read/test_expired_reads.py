"""A reader of a batch older than an expiry that deleted one of its files says so (BadInput naming
the file and the expiry), whoever reads: each snapshot opened on one ``Store`` object for its own
batch, a reader given a snapshot's files on a ``Store`` opened afresh (a Spark task), and the
``rocketmq`` data source's two engines."""
from __future__ import annotations

import json
import os
import re

import pytest

from storelib.errors import BadInput, CorruptStore

FIRST = "commitlog/00000000000000000000"
NOW = 4102444800000             # 2100-01-01: every message is older than the expiry's hour


@pytest.fixture(scope="module")
def expired(tmp_path_factory) -> tuple[str, str]:
    """(store, the expiry's batch id): batch 1 wrote several segments, batch 2 is an expiry that
    deleted all but the last of them."""
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.ops.expire import expire
    from storelib.runtime.localrun import LocalSession
    tmp = tmp_path_factory.mktemp("expired")
    store = str(tmp / "store")
    src = tmp / "m.jsonl"
    src.write_text("".join(json.dumps({"topic": "t", "body": f"{k:04d}" * 2000}) + "\n" for k in range(40)))
    run_ingest(LocalSession(), store, str(src), "jsonl", StoreConfig(mappedFileSizeCommitLog=65536,
               mappedFileSizeConsumeQueue=600, maxHashSlotNum=64, maxIndexNum=256), quiet=True)
    out = expire(store, 1, now_ms=NOW, quiet=True)
    assert not os.path.exists(os.path.join(store, FIRST)), out
    return store, str(out["batch_id"])


def _is_expiry_error(e: BaseException, expiry: str) -> bool:
    text = str(e)
    return FIRST in text and f"was deleted by the expiry {expiry}" in text


def test_two_snapshots_on_one_store_each_explain_their_own_batch(expired):
    """The reader of batch 1 says what removed its file after a reader of the latest batch was
    opened on the same Store; the latest one, which never had the file, is not told of it."""
    from storelib.read.query import open_store
    from storelib.table.storefiles import as_store
    path, expiry = expired
    store = as_store(path)
    old = open_store(store, as_of_batch=1)
    latest = open_store(store)
    with pytest.raises(BadInput) as e:
        old.get_by_offset(0)
    assert _is_expiry_error(e.value, expiry), e.value
    assert latest.get_by_offset(0) is None
    old_again = open_store(store, as_of_batch=1)
    open_store(store, as_of_batch=2)
    with pytest.raises(BadInput) as e:
        old_again.get_by_queue_offset("t", 0, 0)
    assert _is_expiry_error(e.value, expiry), e.value


def test_a_reader_given_the_files_on_a_store_opened_afresh(expired):
    """A snapshot's files handed to a reader on another Store object (as a Spark task gets them,
    pickled: ``query --queries``) explain the same; a live file that is missing is damage."""
    import pickle
    from storelib.io.storage import Store
    from storelib.read.query import StoreReader
    from storelib.table.storefiles import open_files
    path, expiry = expired
    files = pickle.loads(pickle.dumps(open_files(path, 1)[0]))
    reader = StoreReader(Store(path), files.config, files)
    with pytest.raises(BadInput) as e:
        reader.get_by_offset(0)
    assert _is_expiry_error(e.value, expiry), e.value
    last = files.commitlog[-1]
    gone = os.path.join(path, last.rel)
    os.rename(gone, gone + ".away")
    try:
        with pytest.raises(CorruptStore) as e:
            StoreReader(Store(path), files.config, files).get_by_offset(last.base)
        assert "missing file" in str(e.value) and expiry not in str(e.value)
    finally:
        os.rename(gone + ".away", gone)


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_a_spark_read_of_the_batch_says_what_deleted_its_file(spark, expired, engine):
    """Both engines of ``spark.read.format("rocketmq")`` of batch 1: the expiry named, not a missing
    file; the expiry's batch reads."""
    from storelib.errors import exit_code, ExitCode
    from storelib.read.datasource import register
    register(spark)
    path, expiry = expired
    with pytest.raises(Exception) as e:
        spark.read.format("rocketmq").option("engine", engine).option("asOfBatch", "1").load(path).count()
    assert _is_expiry_error(e.value, expiry), str(e.value)[-3000:]
    assert exit_code(e.value) == ExitCode.BAD_INPUT
    kept = spark.read.format("rocketmq").option("engine", engine).option("asOfBatch", expiry).load(path).count()
    assert 0 < kept < 40


def test_a_python_task_of_the_batch_says_what_deleted_its_file(expired):
    """A Python task given a split of batch 1 (planned before the expiry committed: the planner's
    refusal did not see it) meets the deleted segment and says what deleted it."""
    from pyspark.sql.datasource import InputPartition
    from storelib.read.datasource import RocketMQReader
    from storelib.read.queuemins import queue_minimums
    from storelib.read.splits import Split
    from storelib.table.storefiles import open_files
    path, expiry = expired
    files = open_files(path, 1)[0]
    seg = files.commitlog[0]
    split = Split(seg.rel, seg.base, seg.valid, seg.base, seg.base + seg.valid, None)
    part = InputPartition(((tuple(split),), None, queue_minimums(files), files.expired))
    with pytest.raises(BadInput) as e:
        list(RocketMQReader({"path": path, "asOfBatch": "1"}).read(part))
    assert _is_expiry_error(e.value, expiry), e.value


def _fresh_store(tmp) -> str:
    """A store of one batch of several segments (as ``expired`` makes, before its expiry)."""
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    store = str(tmp / "store")
    src = tmp / "m.jsonl"
    src.write_text("".join(json.dumps({"topic": "t", "body": f"{k:04d}" * 2000}) + "\n" for k in range(40)))
    run_ingest(LocalSession(), store, str(src), "jsonl", StoreConfig(mappedFileSizeCommitLog=65536,
               mappedFileSizeConsumeQueue=600, maxHashSlotNum=64, maxIndexNum=256), quiet=True)
    return store


def test_a_jvm_read_planned_before_an_expiry_says_what_deleted_its_file(spark, tmp_path):
    """A JVM reader's DataFrame of the latest batch (no asOfBatch), planned before an expiry
    committed: its task meets a file the expiry deleted, and the driver says so (the expiry named,
    exit 2), not that the store is damaged; a file that is really missing stays damage."""
    from storelib.errors import exit_code, ExitCode
    from storelib.ops.expire import expire
    from storelib.read.datasource import register
    register(spark)
    path = _fresh_store(tmp_path)
    df = spark.read.format("rocketmq").option("engine", "jvm").load(path)
    planned_too = spark.read.format("rocketmq").option("engine", "jvm").load(path)
    out = expire(path, 1, now_ms=NOW, quiet=True)
    assert not os.path.exists(os.path.join(path, FIRST)), out
    with pytest.raises(Exception) as e:
        df.count()
    # the expiry deleted several segments: the task that fails first names its own
    named = re.search(r"(commitlog/\d{20}) of batch \S+ \(seq \d+\) was deleted by the expiry "
                      + re.escape(str(out["batch_id"])), str(e.value))
    assert named and not os.path.exists(os.path.join(path, named.group(1))), str(e.value)[-3000:]
    assert "CorruptStore" not in str(e.value), str(e.value)[-3000:]
    assert exit_code(e.value) == ExitCode.BAD_INPUT
    last = os.path.join(path, sorted(os.listdir(os.path.join(path, "commitlog")))[-1].join(["commitlog/", ""]))
    os.rename(last, last + ".away")
    try:
        with pytest.raises(Exception) as e:
            spark.read.format("rocketmq").option("engine", "jvm").load(path).count()
        assert "missing file" in str(e.value) and "was deleted by the expiry" not in str(e.value), str(e.value)[-3000:]
        assert exit_code(e.value) == ExitCode.FAILED
        del planned_too
    finally:
        os.rename(last + ".away", last)


def test_history_is_read_only_when_a_planned_file_is_gone(expired, monkeypatch):
    """The refusal of an ``asOfBatch`` plan reads the manifest's history only when a planned file
    is no longer live (the latest snapshot's file list tells), and then once, however many of
    its files and tasks ask (the expiry's removals, once read, are known to the process)."""
    from storelib.read.splits import refuse_expired
    from storelib.table import expired as expired_mod
    from storelib.table import manifest
    from storelib.table.storefiles import as_store, open_files
    path, expiry = expired
    store = as_store(path)
    reads = []
    plain = manifest.read_tables
    monkeypatch.setattr(manifest, "read_tables", lambda *a, **k: reads.append(1) or plain(*a, **k))
    monkeypatch.setattr(expired_mod, "_KNOWN", {}, raising=False)
    files = open_files(store, 1)[0]
    live = [s.rel for s in files.commitlog if os.path.exists(os.path.join(path, s.rel))]
    reads.clear()
    refuse_expired("1", store, files, live)
    assert reads == []
    with pytest.raises(BadInput) as e:
        refuse_expired("1", store, files, [FIRST, *live])
    assert _is_expiry_error(e.value, expiry), e.value
    assert len(reads) == 1
    for _ in range(3):                              # a task's explanation of the same file
        assert _is_expiry_error(files.expired.error(store, [FIRST]), expiry)
    assert len(reads) == 1
