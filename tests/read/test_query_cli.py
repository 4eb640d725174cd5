"""jobs/query.py: the RocketMQ-compatible batch job (spark-submit) and the human subcommands.

Stores: (a) small-roll ingested by rocketlake in two batches (so --as-of-batch and the
staging fallback have something to show), (b) the RocketMQ-written golden small-roll store.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import GOLDEN, ROOT
from storelib.cli import query as querycli
from storelib.format.textforms import parse_properties_string
from storelib.format.config import StoreConfig
from storelib.read.query import open_store

SMALL = os.path.join(GOLDEN, "small-roll")
SMALL_CONFIG = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600,
                "maxHashSlotNum": 64, "maxIndexNum": 256}
HALF = 1500


def _jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(x) for x in fh if x.strip()]


@pytest.fixture(scope="session")
def small_messages():
    msgs = _jsonl(os.path.join(SMALL, "messages.jsonl"))
    puts = _jsonl(os.path.join(SMALL, "put_results.jsonl"))
    out = []
    for m, p in zip(msgs, puts):
        props = parse_properties_string(m["properties_string"])
        out.append(dict(topic=m["topic"], ts=p["store_timestamp"], off=p["wrote_offset"], msg_id=p["msg_id"],
                        uniq=props.get("UNIQ_KEY"), keys=[t for t in props.get("KEYS", "").split(" ") if t],
                        rollback=(m["sys_flag"] & 0xC) == 0xC, queue_id=m["queue_id"],
                        queue_offset=p["queue_offset"], cq=(m["sys_flag"] & 0xC) in (0, 0x8)))
    return out


@pytest.fixture(scope="session")
def rl_store(spark, tmp_path_factory):
    """small-roll written by rocketlake: batch "first" = lines 1..1500, batch "second" = the rest."""
    from storelib.ingest.driver import run_ingest
    tmp = tmp_path_factory.mktemp("rl-small")
    lines = open(os.path.join(SMALL, "messages.jsonl"), encoding="utf-8").read().splitlines(True)
    (tmp / "a.jsonl").write_text("".join(lines[:HALF]), encoding="utf-8")
    (tmp / "b.jsonl").write_text("".join(lines[HALF:]), encoding="utf-8")
    store = str(tmp / "store")
    cfg = StoreConfig(**SMALL_CONFIG)
    run_ingest(spark, store, str(tmp / "a.jsonl"), "jsonl", cfg, batch_id="first", quiet=True)
    run_ingest(spark, store, str(tmp / "b.jsonl"), "jsonl", cfg, batch_id="second", quiet=True)
    return store


@pytest.fixture(scope="session")
def golden_store(restored_golden):
    return restored_golden("small-roll")


def run_cli(*argv):
    """querycli.main in process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = querycli.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _lines(text):
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def _brute(msgs, topic, key, begin=None, end=None):
    hits = [m for m in msgs if m["topic"] == topic and not m["rollback"] and (m["uniq"] == key or key in m["keys"])
            and (begin is None or m["ts"] >= begin) and (end is None or m["ts"] <= end)]
    return [m["off"] for m in sorted(hits, key=lambda m: (m["ts"], m["off"]))]


# --------------------------------------------------------------------------- compat job (spark-submit)
@pytest.mark.parametrize("which", ["rocketlake", "golden"])
def test_compat_job_spark_submit(which, rl_store, golden_store, tmp_path):
    store = rl_store if which == "rocketlake" else golden_store
    out = tmp_path / "answers.jsonl"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    cmd = [submit, "--master", "local[2]", "--conf", "spark.ui.showConsoleProgress=false",
           "--conf", "spark.ui.enabled=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           os.path.join(ROOT, "jobs", "query.py"), "--store", store,
           "--queries", os.path.join(SMALL, "queries.jsonl"), "--output", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    want = open(os.path.join(SMALL, "answers.jsonl"), "rb").read()
    assert out.read_bytes() == want


# --------------------------------------------------------------------------- snapshots
def test_as_of_batch_and_latest(rl_store, small_messages):
    first = open_store(rl_store, "first")
    latest = open_store(rl_store)
    assert first.snapshot.batch_id == "first" and latest.snapshot.batch_id == "second"
    assert open_store(rl_store, 1).snapshot.batch_id == "first"
    older = small_messages[:HALF]
    last = older[-1]
    assert first.get_max_phy_offset() == last["off"] + first.get_by_offset(last["off"])["store_size"]
    for topic, key in [("metrics-raw", "hot-metrics-raw"), ("audit_log", "hot-audit_log"), ("coupon_issue", "Aa")]:
        assert [m["commitlog_offset"] for m in first.find_by_key(topic, key).messages] == _brute(older, topic, key)
        assert [m["commitlog_offset"] for m in latest.find_by_key(topic, key).messages] == \
            _brute(small_messages, topic, key)
    newer = small_messages[HALF + 10]
    assert first.get_by_msg_id(newer["msg_id"]) is None
    assert latest.get_by_msg_id(newer["msg_id"])["commitlog_offset"] == newer["off"]
    # CLI: --as-of-batch, and an unknown batch is bad input (exit 2)
    rc, out, err = run_cli("id", "--store", rl_store, "--as-of-batch", "first", newer["msg_id"])
    assert rc == 0 and out == "" and "nothing found" in err
    rc, out, err = run_cli("id", "--store", rl_store, "--as-of-batch", "nope", newer["msg_id"])
    assert rc == 2 and "no committed batch" in err


def test_unfinished_publish_reads_staged_files(rl_store, tmp_path):
    """A committed batch whose publish stopped half way: staged copies serve the missing / old files."""
    from storelib.table import manifest
    from storelib.io import storage
    store = str(tmp_path / "store")
    shutil.copytree(rl_store, store)
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    rows = [r for r in snap.files.values() if r["batch_id"] == "second" and r["kind"] != "checkpoint"
            and r.get("staged_path")]
    # new files are staged and renamed at publish (files continued in place have no staged copy)
    assert rows, "the second batch staged no new file"
    reference = open_store(rl_store)
    for i, r in enumerate(sorted(rows, key=lambda r: r["path"])):
        os.makedirs(os.path.dirname(st.path(r["staged_path"])), exist_ok=True)
        shutil.copyfile(st.path(r["path"]), st.path(r["staged_path"]))
        if i % 2 == 0:
            os.remove(st.path(r["path"]))                   # not published yet
        else:
            with open(st.path(r["path"]), "r+b") as fh:      # an older version of the file
                fh.truncate(max(0, (r["valid_bytes"] or 0) // 3))
    r = open_store(store)
    want = [json.loads(x) for x in open(os.path.join(SMALL, "queries.jsonl"))]
    answers = open(os.path.join(SMALL, "answers.jsonl"), encoding="utf-8").read().splitlines()
    for q, a in zip(want, answers):
        assert json.dumps(r.answer(q), ensure_ascii=False, separators=(",", ":")) == a, q
    assert r.files.commitlog[-1].rel.startswith("_rocketlake/staging/second/")
    assert reference.files.commitlog[-1].rel.startswith("commitlog/")


# --------------------------------------------------------------------------- human subcommands
def test_key_exact_vs_rocketmq_compat(golden_store, small_messages):
    topic, key = "metrics-raw", "hot-metrics-raw"
    rc, out, err = run_cli("key", "--store", golden_store, "--topic", topic, "--key", key)
    exact = _lines(out)
    assert rc == 0 and [m["commitlog_offset"] for m in exact] == _brute(small_messages, topic, key)
    assert len(exact) > 64
    rc, out, err = run_cli("key", "--store", golden_store, "--topic", topic, "--key", key, "--rocketmq-compat")
    compat = _lines(out)
    qm = open_store(golden_store).query_message(topic, key, 64, 0, 2**63 - 1)
    assert rc == 0 and [m["commitlog_offset"] for m in compat] == qm["phy_offsets"] and len(compat) == 64
    # hash-colliding keys: RocketMQ returns both, exact only the real key
    rc, out, _ = run_cli("key", "--store", golden_store, "--topic", "coupon_issue", "--key", "Aa")
    assert [m["commitlog_offset"] for m in _lines(out)] == _brute(small_messages, "coupon_issue", "Aa")
    rc, out, _ = run_cli("key", "--store", golden_store, "--topic", "coupon_issue", "--key", "Aa", "--rocketmq-compat")
    compat = _lines(out)
    assert any(m["properties"].get("KEYS", "").split(" ").count("Aa") == 0 and
               m["properties"].get("UNIQ_KEY") != "Aa" for m in compat)
    # time window, body as text, fields
    m0 = exact[10]
    rc, out, _ = run_cli("key", "--store", golden_store, "--topic", topic, "--key", key,
                         "--begin", m0["store_timestamp"], "--end", m0["store_timestamp"], "--body-as", "text")
    got = _lines(out)
    assert m0["commitlog_offset"] in [m["commitlog_offset"] for m in got]
    assert all(m["store_timestamp"] == m0["store_timestamp"] for m in got)
    assert isinstance(got[0]["body"], str) and isinstance(got[0]["properties"], dict)


def test_key_paging_past_64(golden_store, small_messages):
    topic, key = "audit_log", "hot-audit_log"
    want = _brute(small_messages, topic, key)
    assert len(want) > 64
    got, after, pages = [], None, 0
    while True:
        argv = ["key", "--store", golden_store, "--topic", topic, "--key", key, "--limit", 30]
        if after:
            argv += ["--after", after]
        rc, out, err = run_cli(*argv)
        assert rc == 0
        got += [m["commitlog_offset"] for m in _lines(out)]
        pages += 1
        if "--after" not in err:
            break
        after = err.split("--after ")[1].split()[0]
    assert got == want and pages == -(-len(want) // 30)


def test_id_unique_key_offset_time(golden_store, small_messages, tmp_path):
    r = open_store(golden_store)
    m = next(x for x in small_messages[500:] if x["uniq"] and x["cq"])
    rc, out, _ = run_cli("id", "--store", golden_store, m["msg_id"])
    assert rc == 0 and [x["commitlog_offset"] for x in _lines(out)] == [m["off"]]
    v6 = next(x for x in small_messages if len(x["msg_id"]) == 56)
    rc, out, _ = run_cli("id", "--store", golden_store, v6["msg_id"])
    assert _lines(out)[0]["msg_id"] == v6["msg_id"]
    rc, out, _ = run_cli("unique-key", "--store", golden_store, "--topic", m["topic"], "--key", m["uniq"])
    assert rc == 0 and m["off"] in [x["commitlog_offset"] for x in _lines(out)]
    assert all(x["uniq_key"] == m["uniq"] for x in _lines(out))
    # offset: exact crosses consume-queue files (30 units here); compat stops at the file end
    q = sorted((x for x in small_messages if x["topic"] == m["topic"] and x["queue_id"] == m["queue_id"] and x["cq"]),
               key=lambda x: x["queue_offset"])
    rc, out, _ = run_cli("offset", "--store", golden_store, "--topic", m["topic"], "--queue", m["queue_id"],
                         "--offset", 25, "--count", 10)
    assert [x["commitlog_offset"] for x in _lines(out)] == [x["off"] for x in q[25:35]]
    rc, out, err = run_cli("offset", "--store", golden_store, "--topic", m["topic"], "--queue", m["queue_id"],
                           "--offset", 25, "--count", 10, "--rocketmq-compat")
    assert [x["commitlog_offset"] for x in _lines(out)] == [x["off"] for x in q[25:30]] and "status=FOUND" in err
    # time: RocketMQ's getOffsetInQueueByTime, both boundaries
    ts = q[40]["ts"]
    for b in ("lower", "upper"):
        rc, out, _ = run_cli("time", "--store", golden_store, "--topic", m["topic"], "--queue", m["queue_id"],
                             "--timestamp", ts, "--boundary", b)
        (row,) = _lines(out)
        assert row["queue_offset"] == r.get_offset_in_queue_by_time(m["topic"], m["queue_id"], ts, b.upper())
    # Parquet output
    pq_out = tmp_path / "k.parquet"
    rc, out, _ = run_cli("key", "--store", golden_store, "--topic", "shipping", "--key", "hot-shipping",
                         "--output", pq_out)
    t = pq.read_table(pq_out)
    assert rc == 0 and out == "" and t.column("commitlog_offset").to_pylist() == \
        _brute(small_messages, "shipping", "hot-shipping")
    assert pa.types.is_map(t.schema.field("properties").type)


def test_nothing_found_vs_failure(golden_store, tmp_path):
    # nothing found: exit 0, empty output, message on stderr
    rc, out, err = run_cli("key", "--store", golden_store, "--topic", "metrics-raw", "--key", "no-such-key")
    assert (rc, out) == (0, "") and "nothing found" in err
    pq_out = tmp_path / "none.parquet"
    rc, out, err = run_cli("key", "--store", golden_store, "--topic", "nosuch", "--key", "K1", "--output", pq_out)
    assert rc == 0 and pq.read_table(pq_out).num_rows == 0 and "nothing found" in err
    rc, out, err = run_cli("time", "--store", golden_store, "--topic", "nosuch", "--queue", 0, "--timestamp", 1)
    assert (rc, out) == (0, "") and "nothing found" in err
    # failures: exit non-zero with an error message
    rc, out, err = run_cli("id", "--store", str(tmp_path / "missing"), "C0A8000A00002A9F00000000001095D4")
    assert rc == 2 and out == "" and "no such store" in err        # the wrong path: a usage error
    rc, out, err = run_cli("id", "--store", golden_store, "C0A8000A00002A9F")
    assert rc == 2 and "malformed message id" in err
    rc, out, err = run_cli("key", "--store", golden_store, "--topic", "t", "--key", "k", "--after", "garbage")
    assert rc == 2 and "--after" in err


def test_single_lookup_runs_without_spark(golden_store):
    """A plain `python jobs/query.py id ...`: answers, and pyspark is never imported (looked at by an
    ``atexit`` handler: the job ends its process once its main returns, storelib.runtime.fastexit)."""
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('PYSPARK_LOADED' if any(m.startswith('pyspark') for m in sys.modules)"
            " else 'NO_PYSPARK', file=sys.stderr))\n"
            "sys.argv = ['query.py', 'id', '--store', %r, %r]\n"
            "runpy.run_path(%r, run_name='__main__')\n") % (golden_store, "C0A8000A00002A9F00000000001095D4",
                                                             os.path.join(ROOT, "jobs", "query.py"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "NO_PYSPARK" in p.stderr, p.stderr[-2000:]
    assert json.loads(p.stdout)["commitlog_offset"] == 1086932


def test_reader_gone_ends_quietly(golden_store):
    """`query.py ... | head`: when stdout's reader has gone, no traceback and no "query failed"."""
    argv = [sys.executable, os.path.join(ROOT, "jobs", "query.py"), "offset", "--store", golden_store,
            "--topic", "metrics-raw", "--queue", "0", "--offset", "0", "--count", "1000"]
    r, w = os.pipe()
    os.close(r)                                  # the reader is gone before the first line
    p = subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(w)
    assert p.returncode == 141 and p.stderr == "", p.stderr[-2000:]


# --------------------------------------------------------------------------- Spark subcommands in process
def test_range_and_keys_commands(spark, golden_store, small_messages, tmp_path):
    begin, end = small_messages[700]["ts"], small_messages[900]["ts"]
    lo, hi = min(begin, end), max(begin, end)
    rc, out, err = run_cli("range", "--store", golden_store, "--begin", lo, "--end", hi, "--topic", "metrics-raw")
    want = sorted(m["off"] for m in small_messages if m["topic"] == "metrics-raw" and lo <= m["ts"] <= hi)
    assert rc == 0 and [m["commitlog_offset"] for m in _lines(out)] == want
    rc, out, err = run_cli("range", "--store", golden_store, "--begin", lo, "--end", hi, "--limit", 7)
    page1 = [m["commitlog_offset"] for m in _lines(out)]
    after = err.split("--after ")[1].split()[0]
    rc, out, err = run_cli("range", "--store", golden_store, "--begin", lo, "--end", hi, "--limit", 7, "--after", after)
    allw = sorted(m["off"] for m in small_messages if lo <= m["ts"] <= hi)
    assert page1 + [m["commitlog_offset"] for m in _lines(out)] == allw[:14]
    rc, out, err = run_cli("range", "--store", golden_store, "--begin", 1, "--end", 2)
    assert (rc, out) == (0, "") and "nothing found" in err
    import pyarrow as pa
    keys = pa.table({"topic": ["metrics-raw", "shipping", "nosuch"], "key": ["hot-metrics-raw", "hot-shipping", "x"]})
    kin = tmp_path / "keys.parquet"
    pq.write_table(keys, kin)
    kout = tmp_path / "found.parquet"
    rc, out, err = run_cli("keys", "--store", golden_store, "--input", kin, "--output", kout)
    t = pq.read_table(kout)
    assert rc == 0
    for topic, key in [("metrics-raw", "hot-metrics-raw"), ("shipping", "hot-shipping")]:
        sub = t.filter(pa.compute.equal(t.column("query_key"), key))
        assert sub.column("commitlog_offset").to_pylist() == _brute(small_messages, topic, key)
