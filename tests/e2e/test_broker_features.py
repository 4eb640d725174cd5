"""rocketlake reads what RocketMQ's own store code writes with the features our other samples
rarely have (tests/support/rmqfeatures.py: RocketMQ 5.3.3's DefaultMessageStore through the
reference writer): batch puts with IPv6 hosts and the properties' CRC32; light message queues
(multi-dispatch: one record, units in several queues); the batch consume queue and the RocksDB
consume queue (refused, named); a broker that died after its puts (abort file, a commitlog
segment allocated ahead of its data). RocketMQ answers the lookups on its store; rocketlake's
verify, stats, broker-compatible answers, exact lookups, import and export are held to it.
Each pinned version writes the features its store code has (rmqfeatures.FEATURES): 5.3.3 in
`make test`, 4.9.8 and 5.5.1 in `make long`.

    RMQ_FEATURE_N=N   messages (batches: N/4) per feature (default 24, `make long` 200)
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from support import longrun
from support import rmqcompare
from support import rmqfeatures
from support import rmqhunt
from support import rmqjars
from support import rmqwriter

N = int(os.environ.get("RMQ_FEATURE_N", "200" if longrun.LONG else "24"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _config(work, name, config, version):
    from storelib.format.config import load_config
    path = os.path.join(work, f"{name}.properties")
    with open(path, "w") as fh:
        for k, v in dict(rmqfeatures.store_config(config), rocketmqVersion=rmqjars.LINES[version]).items():
            fh.write(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n")
    return load_config(path)


def _lmq_queries(messages):
    qs = []
    for t in rmqfeatures.LMQ_QUEUES:
        base = {"topic": t, "queue_id": 0}
        qs += [dict(base, type="getMinOffsetInQueue"), dict(base, type="getMaxOffsetInQueue"),
               dict(base, type="getMessage", group="g", offset=0, max_msg_nums=32)]
        qs += [dict(base, type="getMessage", group="g", offset=o, max_msg_nums=1) for o in range(len(messages) + 1)]
        for ts in sorted({m["store_timestamp"] + d for m in messages for d in (-1, 0, 1)}):
            qs += [dict(base, type="getOffsetInQueueByTime", timestamp=ts, boundary=b) for b in ("LOWER", "UPPER")]
    return qs


@pytest.fixture(scope="module", params=[rmqjars.V5, longrun.long_only(rmqjars.V4), longrun.long_only(rmqjars.NEWEST)])
def stores(request, tmp_path_factory):
    V = request.param
    try:
        rmqjars.compile(V, "main")
    except rmqjars.Unavailable as e:
        pytest.skip(f"RocketMQ {V} unavailable: {e}")
    work = str(tmp_path_factory.mktemp(f"features-{V}"))
    cases = rmqfeatures.cases(N, V)
    jobs = {name: rmqwriter.Job(os.path.join(work, name), msgs, cfg) for name, (msgs, cfg) in cases.items()}
    rmqwriter.write_stores(V, [j for n, j in jobs.items() if n != "crash"], threads=4, timeout=300)
    rmqwriter.write_stores(V, [jobs["crash"]], threads=1, timeout=300)   # it halts its JVM
    for name, job in jobs.items():
        assert job.error is None, f"RocketMQ could not write {name}: {job.error[:2000]}"
    # RocketMQ answers on copies (opening a store may change it), rocketlake on the written ones
    asked = []
    for name in ("batch", "lmq"):
        job = jobs[name]
        copy = rmqwriter.Job(job.store + "-answered", job.messages, job.config)
        shutil.copytree(job.store, copy.store)
        copy.queries = rmqhunt.make_queries(job.messages, job.results) + (
            _lmq_queries(job.messages) if name == "lmq" else [])
        for i, q in enumerate(copy.queries):
            q["qid"] = i
        asked.append(copy)
    rmqwriter.write_stores(V, asked, threads=2, answer_only=True, timeout=300)
    out = _Cases(V)
    for name, job in jobs.items():
        out[name] = {"store": job.store, "messages": job.messages, "results": job.results,
                     "config": _config(work, name, job.config, V), "work": work}
    for name, copy in zip(("batch", "lmq"), asked):
        assert copy.error is None, f"RocketMQ could not answer on {name}: {copy.error[:2000]}"
        out[name]["queries"] = copy.queries
        out[name]["answers"] = {a["qid"]: a for a in map(json.loads, open(copy.answers, encoding="utf-8"))}
    return out


class _Cases(dict):
    """The version's stores by feature; a feature its store code lacks skips the test."""

    def __init__(self, version):
        super().__init__()
        self.version = version

    def __missing__(self, name):
        pytest.skip(f"RocketMQ {self.version}'s store code has no {name} (rmqfeatures.FEATURES)")


def _verify(store, cfg, manifest=False):
    from storelib.verify.driver import verify_store
    return [str(p) for p in verify_store(store, cfg, deep=True, use_manifest=manifest, threads=2).problems]


def _answers_differ(case):
    from storelib.read.query import open_store
    reader = open_store(case["store"], config=case["config"])
    theirs = case["answers"]
    return (rmqhunt._compat(reader, case["queries"], theirs)
            + rmqhunt._exact(reader, case["store"], case["config"], case["queries"], theirs))


def _stats(case):
    from storelib.io import storage
    from storelib.ops.inspect import stats
    return stats(storage.Store(case["store"]), None, case["config"])["total"]


def _import_export(case, spark=None):
    from storelib.ops.adopt import adopt
    from storelib.table.export import export_store
    imported, exported = case["store"] + "-imported", case["store"] + "-exported"
    r = adopt(spark, imported, case["store"], case["config"], quiet=True)
    assert r["messages"] == len(case["messages"]) and _verify(imported, None, manifest=True) == []
    export_store(imported, exported)
    return rmqcompare.compare(case["store"], exported)


def test_batch_puts_with_ipv6_hosts_and_crc_read_as_rocketmq(stores):
    case = stores["batch"]
    assert {int(r[3][:2] != "C0") for r in case["results"]} == {0, 1}, "IPv4 and IPv6 store hosts both"
    from storelib.read.localscan import scan_range_local
    props = scan_range_local(case["store"], 0, 2**62, None, config=case["config"]).column("properties").to_pylist()
    assert {any(k == "__CRC32#" for k, _ in p) for p in props} == {rmqfeatures.HAS_PROP_CRC[stores.version]}
    assert _verify(case["store"], case["config"]) == []
    assert _stats(case)["messages_readable"] == len(case["messages"])
    assert _answers_differ(case) == []
    assert _import_export(case) == []


def test_rocketlake_ingest_of_batch_put_records_is_rocketmqs_bytes(stores, tmp_path):
    """The reverse: the records of RocketMQ's batch puts (batch-level properties, IPv6 hosts,
    CRC32) as rocketlake's input give the same files, where no batch meets a segment end (one
    that does goes whole to the next segment in RocketMQ: docs/FORMAT.md §1.10)."""
    import base64
    from storelib.ingest.driver import run_ingest
    from storelib.read.localscan import scan_range_local
    from storelib.runtime.localrun import LocalSession
    from support.rmqcases import properties_string
    case = stores["batch-whole"]
    rows = scan_range_local(case["store"], -2**63, 2**63 - 1, None, config=case["config"]).to_pylist()
    assert len(rows) == len(case["messages"])
    inp = tmp_path / "records.jsonl"
    log = b"".join(open(os.path.join(case["store"], "commitlog", f), "rb").read()
                   for f in sorted(os.listdir(os.path.join(case["store"], "commitlog"))))
    with open(inp, "w", encoding="utf-8") as fh:
        for r in sorted(rows, key=lambda r: r["commitlog_offset"]):
            m = {k: r[k] for k in ("topic", "queue_id", "flag", "sys_flag", "born_timestamp", "store_timestamp",
                                   "born_host", "store_host", "reconsume_times", "prepared_transaction_offset")}
            pairs = [list(p) for p in r["properties"] if p[0] != "__CRC32#"]
            # the string as stored (before the CRC32 5.x appends): 5.x ends it with a separator, 4.9's
            # batch encoder does not
            record = log[r["commitlog_offset"]:r["commitlog_offset"] + r["store_size"]]
            stored = [s for s in (properties_string(pairs), properties_string(pairs)[:-1]) if s.encode() in record]
            assert stored, f"record at {r['commitlog_offset']}: properties are not {pairs} as stored"
            m.update(body_b64=base64.b64encode(r["body"]).decode(), properties=pairs, properties_string=stored[0])
            fh.write(json.dumps(m, ensure_ascii=False) + "\n")
    ours = str(tmp_path / "rocketlake")
    run_ingest(LocalSession(), ours, str(inp), "jsonl", case["config"], batch_id="b0", quiet=True)
    assert rmqcompare.compare(case["store"], ours) == []


def test_light_message_queues_verify_count_once_and_answer_as_rocketmq(stores):
    case = stores["lmq"]
    n = len(case["messages"])
    lmq_units = sum(1 + i % 2 for i in range(n))
    assert os.path.isdir(os.path.join(case["store"], "consumequeue", "%LMQ%b", "0"))
    assert _verify(case["store"], case["config"]) == []
    total = _stats(case)
    assert (total["messages_readable"], total.get("lmq_units_readable")) == (n, lmq_units)
    assert _answers_differ(case) == []
    assert _import_export(case) == []


def test_repair_leaves_light_queues_as_they_are_and_says_why(stores):
    from storelib.io import storage
    from storelib.ops.repair import plan_repair
    case = stores["lmq"]
    found = plan_repair(storage.Store(case["store"]), case["config"])["findings"]
    light = [f for f in found if f["path"].startswith("consumequeue/%LMQ%")]
    assert light and all(f["state"] == "underived" and "light message queue" in f["detail"] for f in light)
    assert {f["state"] for f in found if f not in light} == {"ok"}


def test_a_unit_of_a_light_queue_its_record_does_not_name_is_a_problem(stores, tmp_path):
    """The LMQ check is not a pass for every unit: a unit of %LMQ%b pointed at a record only
    %LMQ%a was dispatched to, and one of %LMQ%a pointed at its record of another offset, are
    reported."""
    case = stores["lmq"]
    found = []
    for wrong, right in (("%LMQ%b", "%LMQ%a"), ("%LMQ%a", "%LMQ%b")):
        store = str(tmp_path / wrong)
        shutil.copytree(case["store"], store)
        with open(os.path.join(store, "consumequeue", right, "0", "0" * 20), "rb") as fh:
            unit = fh.read(20)                  # offset 0 of the other queue
        with open(os.path.join(store, "consumequeue", wrong, "0", "0" * 20), "r+b") as fh:
            fh.write(unit)
        found.append([p for p in _verify(store, case["config"]) if p.startswith(f"consumequeue/{wrong}/0/")])
    assert len(found[0]) == 1 and "nor dispatched to it" in found[0][0], found[0]
    assert any("INNER_MULTI_QUEUE_OFFSET" in p for p in found[1]), found[1]


@pytest.mark.parametrize("name, feature", [("batchcq", "batch consume queue"), ("rocksdb", "RocksDB consume queue")])
def test_queues_kept_elsewhere_are_refused_by_name(stores, name, feature):
    from storelib.errors import UnsupportedStore
    from storelib.ops.adopt import adopt
    from storelib.read.localscan import scan_range_local
    from storelib.read.query import open_store
    case = stores[name]
    for read in (lambda: open_store(case["store"], config=case["config"]),
                 lambda: scan_range_local(case["store"], 0, 2**62, None, config=case["config"]),
                 lambda: _verify(case["store"], case["config"]),
                 lambda: _stats(case)):
        with pytest.raises(UnsupportedStore, match=feature):
            read()
    target = case["store"] + "-imported"
    with pytest.raises(UnsupportedStore, match=feature):
        adopt(None, target, case["store"], case["config"], quiet=True)
    assert not os.path.exists(target) or not os.listdir(target)


@pytest.mark.parametrize("name, feature", [("lmq", "light message queues"), ("batchcq", "batch consume queue")])
def test_a_mirror_refuses_queues_it_does_not_derive(stores, name, feature):
    from storelib.errors import MirrorError
    from storelib.ops.mirror import mirror_broker
    case = stores[name]
    target = case["store"] + "-mirror"
    with pytest.raises(MirrorError, match=feature):
        mirror_broker(case["store"], target, case["config"], quiet=True)
    assert not os.path.exists(target) or not os.listdir(target)


def test_a_broker_that_died_reads_as_its_recovery_would(stores):
    """Halted after its puts: abort is there, and the segment RocketMQ allocated ahead of its
    data is all zero; recovery ends the data in the segment before it and deletes it."""
    from storelib.errors import AdoptError
    from storelib.ops.adopt import adopt
    from storelib.read.localscan import scan_range_local
    case = stores["crash"]
    store, cfg = case["store"], case["config"]
    assert os.path.exists(os.path.join(store, "abort"))
    segs = sorted(os.listdir(os.path.join(store, "commitlog")))
    last = open(os.path.join(store, "commitlog", segs[-1]), "rb").read()
    assert last.count(0) == len(last), "RocketMQ allocated no segment ahead (nothing to check)"
    assert _verify(store, cfg) == []
    got = scan_range_local(store, 0, 2**62, None, config=cfg).column("commitlog_offset").to_pylist()
    assert got == sorted(int(r[1]) for r in case["results"])
    assert _stats(case)["messages_readable"] == len(case["messages"])
    with pytest.raises(AdoptError, match="did not shut down cleanly"):
        adopt(None, store + "-imported", store, cfg, quiet=True)


@longrun.long_test("a Spark session")
@pytest.mark.spark
@pytest.mark.parametrize("name", ["batch", "lmq", "crash"])
def test_spark_reads_of_both_engines_are_the_local_scan(stores, spark, name):
    from storelib.read.datasource import register
    from storelib.read.localscan import scan_range_local
    case = stores[name]
    cfg = os.path.join(case["work"], f"{name}.properties")          # the one _config loaded
    register(spark)

    def key(r, props):
        props = props.items() if isinstance(props, dict) else props      # Spark's map, the scan's pairs
        return r["commitlog_offset"], r["msg_id"], bytes(r["body"]), tuple(sorted(map(tuple, props)))
    want = sorted(key(r, r["properties"]) for r in scan_range_local(case["store"], 0, 2**62, None,
                                                                     config=case["config"]).to_pylist())
    assert len(want) == len(case["messages"])
    for engine in ("jvm", "python"):
        rows = spark.read.format("rocketmq").option("engine", engine).option("config", cfg).load(case["store"]).collect()
        assert sorted(key(r, r["properties"]) for r in rows) == want, engine
