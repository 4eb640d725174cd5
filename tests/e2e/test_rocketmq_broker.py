"""A real RocketMQ 5.3.3 name server, broker and client serve a store rocketlake wrote.

rocketlake writes the first 2,500 messages of the small-roll set in three batches (64 KiB
segments: many rolls; PREPARED/COMMIT/ROLLBACK; delay messages on SCHEDULE_TOPIC_XXXX; topics of
127, 128 and 210 characters). A broker on 127.0.0.1 (ephemeral ports) opens a copy of it as its
storePathRootDir; a DefaultMQPullConsumer reads every queue of every topic from its min offset,
and every message must be the input's (topic, queue, queue offset, commitlog offset, msgId,
body, properties with keys and tags, hosts, timestamps, flags). queryMessage by key and
After the broker stops, rocketlake verifies the store and appends the last 500 messages; the
result is the golden store byte for byte, and a broker started again serves all 3,000, and
answers queryMessage by key and viewMessage by id as RocketMQ did on its own store (the set's
recorded answers).

The 4.9 line's broker on a rocketmqVersion=4.9 store runs in `make long` (two broker starts, as
test_broker_features runs its other lines there): `make test` holds a 4.9 store to 4.9.8's own
store code byte for byte (test_rocketmq_differential.py::test_differential_4_9_8) and serves a
rocketlake store, appends after a broker and serves it again with 5.3.3's broker here.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import zlib

import pytest

from support import goldenlib
from support import rmqcompare
from support import rmqjars
from support.longrun import long_test
from support.rmqbroker import Broker

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")

pytestmark = pytest.mark.slow
SET = "small-roll"
FIRST = 2500
CLIENT_PROPS = {"MIN_OFFSET", "MAX_OFFSET"}        # the client adds these to every pulled message


def host(text: str) -> tuple:
    h, port = text.rsplit(":", 1)
    return ipaddress.ip_address(h.strip("[]")), int(port)


def ingest(jobs: list[dict], work: str) -> None:
    spec = os.path.join(work, f"ingest-{len(os.listdir(work))}.json")
    with open(spec, "w") as fh:
        json.dump({"master": "local[2]", "threads": 1, "jobs": jobs}, fh)
    r = subprocess.run([sys.executable, os.path.join(SUPPORT, "rmqingest.py"), spec], capture_output=True, text=True,
                       timeout=900, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    for j in jobs:
        res = json.load(open(j["result"]))
        assert res["rc"] == 0, (res, r.stderr[-2000:])


def expected(set_dir: str, n: int):
    """Per (topic, queue): the messages with a consume-queue unit, by queue offset; and all by msgId."""
    msgs = [json.loads(x) for x in open(os.path.join(set_dir, "messages.jsonl"), encoding="utf-8")][:n]
    puts = [json.loads(x) for x in open(os.path.join(set_dir, "put_results.jsonl"))][:n]
    queues = {}
    for m, p in zip(msgs, puts):
        if m["sys_flag"] & 0xC in (0, 0x8):
            queues.setdefault((m["topic"], m["queue_id"]), []).append((m, p))
    return msgs, puts, queues


def check_message(got: dict, m: dict, p: dict) -> None:
    where = f"{m['topic'][:40]}/{m['queue_id']}@{p['queue_offset']}"
    body = base64.b64decode(m["body_b64"])
    if m["sys_flag"] & 0x1:
        body = zlib.decompress(body)                # the client uncompresses compressed bodies
    want = {"topic": m["topic"], "queue_id": m["queue_id"], "queue_offset": p["queue_offset"],
            "commitlog_offset": p["wrote_offset"], "offset_msg_id": p["msg_id"], "flag": m["flag"],
            "born_timestamp": m["born_timestamp"], "store_timestamp": m["store_timestamp"],
            "reconsume_times": m["reconsume_times"], "prepared_transaction_offset": m["prepared_transaction_offset"],
            "body": body, "born_host": host(m["born_host"]), "store_host": host(m["store_host"])}
    have = {k: got[k] for k in want}
    have["born_host"], have["store_host"] = host(got["born_host"]), host(got["store_host"])
    assert have == want, where
    assert got["sys_flag"] in (m["sys_flag"], m["sys_flag"] & ~0x1), where
    props = dict(m["properties"])
    extra = {k: v for k, v in got["properties"].items() if k not in props}
    assert {k: got["properties"].get(k) for k in props} == props, where
    assert set(extra) <= CLIENT_PROPS, (where, extra)
    assert got["msg_id"] == props.get("UNIQ_KEY", p["msg_id"]), where


def consume_all(b: Broker, queues: dict) -> int:
    n = 0
    for topic in sorted({t for t, _ in queues}):
        ranges, got, other = b.consume(topic, 1 + max(q for t, q in queues if t == topic))
        # The name server answered no route for the topics of the store the broker found on disk
        # (its topics.json), so the client's requests go to the broker's address directly
        # (BrokerCheck.consume); a "route" line records that, anything else fails.
        assert [x for x in other if not x.startswith("route")] == [], \
            (topic[:40], other[:5])
        for q in sorted(q for t, q in queues if t == topic):
            exp = queues[(topic, q)]
            assert ranges.get(q) == (exp[0][1]["queue_offset"], exp[-1][1]["queue_offset"] + 1), (topic[:40], q)
            mine = sorted((x for x in got if x["queue_id"] == q), key=lambda x: x["queue_offset"])
            assert len(mine) == len(exp), (topic[:40], q)
            for g, (m, p) in zip(mine, exp):
                check_message(g, m, p)
            n += len(mine)
    return n


def broker_topics(store: str, queues: dict) -> None:
    """config/topics.json for the broker (its topic table), and config/delayOffset.json saying
    every delay message was delivered already (so the broker's schedule service writes nothing)."""
    os.makedirs(os.path.join(store, "config"), exist_ok=True)
    nq = {}
    for t, q in queues:
        nq[t] = max(nq.get(t, 0), q + 1)
    table = {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6, "topicFilterType": "SINGLE_TAG",
                 "topicSysFlag": 0, "order": False, "attributes": {}}
             for t, n in nq.items() if t != "SCHEDULE_TOPIC_XXXX"}
    with open(os.path.join(store, "config", "topics.json"), "w") as fh:
        json.dump({"topicConfigTable": table, "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 0}}, fh)
    delay = {str(q + 1): len(v) for (t, q), v in queues.items() if t == "SCHEDULE_TOPIC_XXXX"}
    with open(os.path.join(store, "config", "delayOffset.json"), "w") as fh:
        json.dump({"offsetTable": {k: v for k, v in delay.items()}}, fh)


def check_queries(b: Broker, set_dir: str, limit: int = 80) -> int:
    """The set's recorded queryMessage / viewMessageById answers (RocketMQ's store API on its own
    store) against the broker's answers to the client's QUERY_MESSAGE / VIEW_MESSAGE_BY_ID
    requests on the rocketlake store: the same messages, in the same order."""
    qs = [json.loads(x) for x in open(os.path.join(set_dir, "queries.jsonl"))]
    ans = {a["qid"]: a for a in map(json.loads, open(os.path.join(set_dir, "answers.jsonl")))}
    done = 0
    for q in qs:
        a = ans[q["qid"]]
        if q["type"] == "queryMessage" and done < limit and q["end"] < 2**62:
            want = a["phy_offsets"]
            got = [m["commitlog_offset"] for m in b.query(q["topic"], q["key"], q["max_num"], q["begin"], q["end"])]
            assert got == want, q
            done += 1
        elif q["type"] == "viewMessageById" and a.get("message"):
            g = b.view(a["message"]["topic"], q["msg_id"])
            assert (g["commitlog_offset"], g["topic"], g["store_timestamp"]) == \
                (a["message"]["commitlog_offset"], a["message"]["topic"], a["message"]["store_timestamp"]), q
            done += 1
    return done


def broker_built() -> None:
    """RocketMQ's 5.x broker compiled (its jars fetched by `make rocketmq`), else a skip."""
    try:
        rmqjars.compile(rmqjars.V5, "broker")
    except rmqjars.Unavailable as e:
        pytest.skip(f"RocketMQ {rmqjars.V5} unavailable: {e}")


def golden_store(tmp_path) -> tuple:
    """The golden set ``SET`` and a copy of its store (as RocketMQ wrote it), once the broker is built."""
    broker_built()
    g = goldenlib.resolve_set(SET)
    return g, goldenlib.restore(g, str(tmp_path / "store"))


def test_broker_serves_a_rocketlake_store(tmp_path):
    broker_built()
    t0 = time.time()
    g = goldenlib.resolve_set(SET)
    cfg = json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"]
    props = tmp_path / "store.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in cfg.items() if k != "flushDiskType"))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").read().splitlines(keepends=True)
    store = str(tmp_path / "store")
    cuts = [0, 700, 1900, FIRST, len(lines)]
    jobs = []
    for i in range(4):
        inp = tmp_path / f"batch{i}.jsonl"
        inp.write_text("".join(lines[cuts[i]:cuts[i + 1]]), encoding="utf-8")
        jobs.append({"store": store, "input": str(inp), "config": str(props), "batch_id": f"b{i}",
                     "partitions": 2, "result": str(tmp_path / f"batch{i}.json")})
    work = str(tmp_path / "work")
    os.makedirs(work)
    ingest(jobs[:3], work)

    broker_cfg = {k: v for k, v in cfg.items() if k != "flushDiskType"}
    _, _, queues = expected(g, FIRST)
    served = str(tmp_path / "served")
    shutil.copytree(store, served)
    broker_topics(served, queues)
    with Broker(served, str(tmp_path / "broker1"), broker_cfg) as b:
        n = consume_all(b, queues)
    assert n == sum(len(v) for v in queues.values())
    t1 = time.time()

    # The broker's copy went back to rocketlake: verified, appended to, then golden and served.
    from storelib import verify_store
    from storelib.format.config import load_config
    # The broker changed one thing in the data files: on shutdown it writes the checkpoint's
    # confirmPhyOffset (bytes 32..39; rocketlake leaves it 0, as RocketMQ's store alone does) =
    # the commit log's max offset. rocketlake's verify names exactly that file (its bytes are no
    # longer the ones the manifest recorded); everything else is as rocketlake wrote it.
    assert rmqcompare.compare(store, served) == ["differs: checkpoint: first difference at byte 37"] or \
        rmqcompare.compare(store, served) == []
    report = verify_store(served, load_config(str(props)))
    assert [p for p in report.problems if not p.startswith("checkpoint@0: sha256 differs")] == [], \
        report.problems[:10]
    jobs[3]["store"] = served
    ingest(jobs[3:], work)
    assert goldenlib.compare(g, served) == []
    _, _, queues = expected(g, len(lines))
    broker_topics(served, queues)
    # nothing reads the store after this broker: killed, not shut down
    with Broker(served, str(tmp_path / "broker2"), broker_cfg, clean_exit=False) as b:
        n = consume_all(b, queues)
        nq = check_queries(b, g)                # the store is now the golden one: its answers
    assert n == sum(len(v) for v in queues.values()) and nq > 10
    print(f"broker test: {time.time() - t0:.0f}s (first broker pass {t1 - t0:.0f}s)")


@long_test("the 4.9 line's broker, two starts (~30-35 s; make test: 4.9.8's store code byte for byte, "
           "5.3.3's broker)")
def test_broker_4_9_serves_a_rocketmq_version_4_9_store(tmp_path):
    """The 4.9 line's broker (4.9.7: Maven Central has no 4.9.8 broker) on a rocketmqVersion=4.9
    store: small-roll's messages without its topics over 127 characters (4.9 has no V2 records),
    in two batches; every queue consumed from its min offset equals the input (queue offsets in
    order, commit-log offsets and msgIds as rocketlake's reader gives them); after the broker
    stops, rocketlake verifies the store and appends a third batch, and a second 4.9 broker
    serves all of it."""
    try:
        rmqjars.compile(rmqjars.V4_BROKER, "broker4")
    except rmqjars.Unavailable as e:
        pytest.skip(f"RocketMQ {rmqjars.V4_BROKER} unavailable: {e}")
    # 4.9's servers bind every interface: the broker JVM gets a network namespace of its own
    ns = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if ns.returncode != 0:
        pytest.skip(f"no network namespace for the 4.9 broker (unshare -rn, ip): {ns.stderr.strip()[:200]}")
    from storelib import verify_store
    from storelib.format.config import load_config
    from storelib.read.query import open_store
    t0 = time.time()
    g = goldenlib.resolve_set(SET)
    cfg = {k: v for k, v in json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"].items()
           if k != "flushDiskType"}
    props = tmp_path / "store.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {**cfg, "rocketmqVersion": "4.9"}.items()))
    msgs = [m for m in map(json.loads, open(os.path.join(g, "messages.jsonl"), encoding="utf-8"))
            if len(m["topic"]) <= 127][:1500]
    store, work = str(tmp_path / "store"), str(tmp_path / "work")
    os.makedirs(work)
    cuts = [0, 600, 1200, len(msgs)]
    jobs = []
    for i in range(3):
        inp = tmp_path / f"batch{i}.jsonl"
        inp.write_text("".join(json.dumps(m) + "\n" for m in msgs[cuts[i]:cuts[i + 1]]), encoding="utf-8")
        jobs.append({"store": store, "input": str(inp), "config": str(props), "batch_id": f"b{i}",
                     "result": str(tmp_path / f"batch{i}.json")})
    ingest(jobs[:2], work)

    def served_by_4_9(n: int, name: str, clean_exit: bool = True) -> int:
        queues = {}
        for m in msgs[:n]:
            if m["sys_flag"] & 0xC in (0, 0x8):
                queues.setdefault((m["topic"], m["queue_id"]), []).append(m)
        broker_topics(store, {k: [None] * len(v) for k, v in queues.items()})
        reader = open_store(store)
        got_n = 0
        with Broker(store, str(tmp_path / name), cfg, version=rmqjars.V4_BROKER, clean_exit=clean_exit) as b:
            for topic in sorted({t for t, _ in queues}):
                ranges, got, other = b.consume(topic, 1 + max(q for t, q in queues if t == topic))
                assert [x for x in other if not x.startswith("route")] == [], (topic[:40], other[:5])
                for q in sorted(q for t, q in queues if t == topic):
                    exp = queues[(topic, q)]
                    assert ranges.get(q) == (0, len(exp)), (topic[:40], q)
                    mine = sorted((x for x in got if x["queue_id"] == q), key=lambda x: x["queue_offset"])
                    assert len(mine) == len(exp), (topic[:40], q)
                    for k, (x, m) in enumerate(zip(mine, exp)):
                        phys = reader.get_commit_log_offset_in_queue(topic, q, k)
                        check_message(x, m, {"queue_offset": k, "wrote_offset": phys,
                                             "msg_id": reader.look_message_by_offset(phys)["msg_id"]})
                    got_n += len(mine)
        return got_n

    served_by_4_9(cuts[2], "broker1")
    t1 = time.time()
    report = verify_store(store, load_config(str(props)))
    assert report.problems == [], report.problems[:10]     # the broker's checkpoint offsets are accepted
    ingest(jobs[2:], work)
    assert verify_store(store, load_config(str(props)), deep=True).problems == []
    n = served_by_4_9(len(msgs), "broker2", clean_exit=False)     # nothing reads the store after it
    assert n == sum(1 for m in msgs if m["sys_flag"] & 0xC in (0, 0x8))
    print(f"4.9 broker test: {time.time() - t0:.0f}s (first broker pass {t1 - t0:.0f}s)")
