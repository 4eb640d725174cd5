"""A running RocketMQ 5.3.3 broker mirrored into the lake (``rocketlake mirror --every 1``).

A real name server, broker and producer (DefaultMQProducer, three topics of four queues, keys and
tags) on 127.0.0.1, 128 KiB CommitLog segments, flushes every 200 ms; the mirror runs as its own
process the whole time:

A. the producer sends at a steady rate while segments roll; the broker is SIGKILLed mid-send
   (what it acknowledged but had not flushed is not mirrored yet: it is not safe);
B. it restarts (abnormal recovery: its abort file is there), the producer sends again, then
   stops; the mirror catches up with every acknowledged message;
C. it restarts with ``fileReservedTime=0`` and every hour a ``deleteWhen``: it deletes its old
   segments (and their queue and index files) while the mirror keeps running.

Then: every message the producer got SEND_OK for is in the mirror at the offset the broker gave
(including the ones the broker deleted); the mirror's CommitLog is byte-identical to the
broker's over the range both hold, so are the consume-queue units, and every index file both hold
whole before the broker's crash; the mirror verifies (deep) and answers a key query; a broker started on ``export
--as-of-batch`` of a middle batch serves exactly the messages of the mirror's CommitLog up to that
batch; a swapped or damaged broker directory stops a cycle with exit 3 and the mirror unchanged.

A second test sends delay-level and transactional messages (Specials.java: RocketMQ's own
DefaultMQProducer and TransactionMQProducer, commits and rollbacks) while the mirror runs, and
checks the mirror's records of them (SCHEDULE_TOPIC_XXXX, the half and op topics, the delivered
and committed copies) and queue units against the broker's, and a broker on the export.

Long (four broker starts, then two): ``make mirror`` (ROCKETLAKE_MIRROR=1); ROCKETLAKE_MIRROR_SECONDS sets
how long each sending phase lasts (default 15), ROCKETLAKE_MIRROR_RATE the messages per second.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
from support.rmqbroker import Broker  # noqa: E402

from storelib.codec import messages as codec  # noqa: E402
from storelib.format import consumequeue, indexfile  # noqa: E402
from storelib.io import storage  # noqa: E402
from storelib.table import manifest  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("ROCKETLAKE_MIRROR"), reason="make mirror (ROCKETLAKE_MIRROR=1)")]

ROOT = os.path.dirname(SUPPORT).rsplit(os.sep, 1)[0]
SECONDS = float(os.environ.get("ROCKETLAKE_MIRROR_SECONDS", "15"))
RATE = float(os.environ.get("ROCKETLAKE_MIRROR_RATE", "150"))
TOPICS = ["mirror_orders", "mirror_payments", "mirror_audit"]
QUEUES = 4
SIZES = {"mappedFileSizeCommitLog": 131072, "mappedFileSizeConsumeQueue": 1200, "maxHashSlotNum": 64,
         "maxIndexNum": 256}
FLUSH = {"flushCommitLogThoroughInterval": 200, "flushConsumeQueueThoroughInterval": 200,
         "flushIntervalConsumeQueue": 200}
RETENTION = {"fileReservedTime": 0, "deleteWhen": ";".join(f"{h:02d}" for h in range(24)), "cleanResourceInterval": 500}


def rocketlake(*args, timeout=600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "storelib.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def sent_lines(path: str) -> list:
    out = []
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            f = line.rstrip("\n").split("\t")
            if len(f) == 8:
                out.append({"i": int(f[0]), "topic": f[1], "queue_id": int(f[2]), "queue_offset": int(f[3]),
                            "offset": int(f[4][-16:], 16), "msg_id": f[5], "key": f[6], "tag": f[7]})
    return out


def mirror_end(store: str) -> int:
    try:
        snap = manifest.load_snapshot(storage.Store(store))
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    return snap.batch["max_phy_offset"] if snap.batch else 0


def wait_until(what, cond, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def settle(store: str, quiet: float = 4.0) -> None:
    """Until the mirror's end has not moved for ``quiet`` seconds."""
    stable = [mirror_end(store), time.time()]

    def settled():
        e = mirror_end(store)
        if e != stable[0]:
            stable[:] = [e, time.time()]
        return time.time() - stable[1] > quiet
    wait_until("the mirror to settle", settled)


def segments(root: str) -> list:
    d = os.path.join(root, "commitlog")
    return sorted(n for n in os.listdir(d) if len(n) == 20) if os.path.isdir(d) else []


def mirror_records(store: str) -> dict:
    """commitlog offset -> (topic, queue id, queue offset, properties) of every record the mirror holds."""
    snap = manifest.load_snapshot(storage.Store(store))
    out = {}
    for r in sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"]):
        with open(os.path.join(store, r["path"]), "rb") as fh:
            buf = np.frombuffer(fh.read(r["valid_bytes"]), np.uint8)
        st, _, _ = codec.record_starts(buf, 0, len(buf))
        t = codec.decode_records(buf, r["base_offset"], np.asarray(st, np.int64), body=False).to_pydict()
        for k in range(len(st)):
            out[t["commitlog_offset"][k]] = (t["topic"][k], t["queue_id"][k], t["queue_offset"][k],
                                             t["properties_string"][k])
    return out


def whole_index_files(broker_dir: str, store: str) -> int:
    """Index files the broker and the mirror both hold with the same entry count (matched by their
    header's begin offset and time; a broker names them by the wall clock): asserted identical;
    how many."""
    snap = manifest.load_snapshot(storage.Store(store))
    mine = {}
    for r in snap.of_kind("index"):
        raw = open(os.path.join(store, r["path"]), "rb").read()
        h = indexfile.IndexHeader.parse(raw[:indexfile.HEADER_SIZE])
        mine[(h.begin_phy_offset, h.begin_timestamp)] = (h.index_count, raw)
    whole = 0
    for name in os.listdir(os.path.join(broker_dir, "index")):
        raw = open(os.path.join(broker_dir, "index", name), "rb").read()
        h = indexfile.IndexHeader.parse(raw[:indexfile.HEADER_SIZE])
        m = mine.get((h.begin_phy_offset, h.begin_timestamp))
        if m is not None and m[0] == h.index_count:
            assert m[1] == raw, name
            whole += 1
    return whole


def same_queue_units(broker_dir: str, store: str) -> int:
    """Consume-queue units the broker and the mirror both hold (the broker's dispatch may lag):
    asserted identical; how many."""
    return sum(queue_units_by_topic(broker_dir, store).values())


def queue_units_by_topic(broker_dir: str, store: str) -> dict:
    """Per topic: the consume-queue units the broker and the mirror both hold, asserted identical."""
    snap = manifest.load_snapshot(storage.Store(store))
    out: dict = {}
    for r in snap.of_kind("consumequeue"):
        p = os.path.join(broker_dir, r["path"])
        if os.path.exists(p):
            theirs, mine = open(p, "rb").read(), open(os.path.join(store, r["path"]), "rb").read()
            n = min(unit_count(theirs), r["valid_bytes"] // 20) * 20
            assert theirs[:n] == mine[:n], r["path"]
            out[r["topic"]] = out.get(r["topic"], 0) + n // 20
    return out


def unit_count(raw: bytes) -> int:
    u = np.frombuffer(raw[:len(raw) // 20 * 20], consumequeue.UNIT_DTYPE)
    nz = np.flatnonzero(u["size"] > 0)
    return int(nz[-1]) + 1 if len(nz) else 0


def test_mirror_a_running_broker(tmp_path):
    broker_dir, store = str(tmp_path / "broker"), str(tmp_path / "mirror")
    sent = str(tmp_path / "sent.tsv")
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SIZES.items()))
    log = open(tmp_path / "mirror.log", "w")
    mirror = None
    try:
        os.makedirs(broker_dir)
        # A: steady sending, segments roll, SIGKILL mid-send
        b = Broker(broker_dir, str(tmp_path / "a"), {**SIZES, **FLUSH})
        with b:
            mirror = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker_dir,
                                       "--store", store, "--every", "1", "--quiet", "--config", str(props)],
                                      stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=ROOT),
                                      cwd=ROOT, start_new_session=True)
            b.ask("topics", ",".join(TOPICS), QUEUES)
            b.ask("produce", sent, RATE, 0, ",".join(TOPICS))
            time.sleep(SECONDS)
            b.kill()
        a_sent = sent_lines(sent)
        assert len(a_sent) > RATE * SECONDS / 2 and len(segments(broker_dir)) >= 3, (len(a_sent), segments(broker_dir))
        assert os.path.exists(os.path.join(broker_dir, "abort"))
        # what the dead broker flushed is mirrored; what it acknowledged but had not flushed waits
        last_a = max(s["offset"] for s in a_sent)
        settle(store)
        assert 0 < mirror_end(store) and mirror_end(store) - last_a < SIZES["mappedFileSizeCommitLog"]
        # the index files as the broker wrote them before its crash (after an abnormal recovery it
        # re-indexes the message at its last index file's end and rebuilds the newest files: its
        # index then differs from a clean dispatch, docs/DESIGN.md)
        assert whole_index_files(broker_dir, store) >= 3
        nxt = max(s["i"] for s in a_sent) + 1000
        # B: abnormal recovery, steady sending again, then a last message later than every other
        with Broker(broker_dir, str(tmp_path / "b"), {**SIZES, **FLUSH}) as b:
            b.ask("topics", ",".join(TOPICS), QUEUES)          # routes for this JVM's name server
            b.ask("produce", sent, RATE, nxt, ",".join(TOPICS))
            time.sleep(SECONDS)
            nxt = int(b.ask("stopproduce")[0].split("\t")[3]) + 1000
            time.sleep(0.05)
            b.ask("produce", str(tmp_path / "fence.tsv"), 20, nxt, ",".join(TOPICS))
            time.sleep(0.5)
            b.ask("stopproduce")
            every = sent_lines(sent)
            last = max(s["offset"] for s in every)
            wait_until("the mirror to hold every acknowledged message", lambda: mirror_end(store) > last)
            time.sleep(1)                                   # the broker's dispatch of the last ones
            assert same_queue_units(broker_dir, store) >= len(every)
        # C: retention deletes the old segments (and their queue and index files) while the mirror runs
        before = segments(broker_dir)
        with Broker(broker_dir, str(tmp_path / "c"), {**SIZES, **FLUSH, **RETENTION}):
            wait_until("the broker's retention", lambda: segments(broker_dir)[0] > before[0], timeout=60)
            time.sleep(3)
        assert len(segments(broker_dir)) < len(before)
        assert mirror.poll() is None, open(tmp_path / "mirror.log").read()[-3000:]
    finally:
        rc = None
        if mirror is not None:
            if mirror.poll() is None:
                os.killpg(mirror.pid, signal.SIGTERM)
            rc = mirror.wait(timeout=120)
        log.close()
    assert rc in (0, 143), open(tmp_path / "mirror.log").read()[-3000:]
    cycles = [json.loads(x.split("rocketlake: ", 1)[1]) for x in open(tmp_path / "mirror.log") if "rocketlake: {" in x]
    batches = [c for c in cycles if c["status"] == "committed"]
    assert len(batches) >= 10

    # every acknowledged message, at the offset the broker named, deleted by the broker or not
    recs = mirror_records(store)
    missing = [s for s in every if s["offset"] not in recs]
    assert not missing, missing[:5]
    for s in every:
        topic, qid, qoff, props_text = recs[s["offset"]]
        assert (topic, qid, qoff) == (s["topic"], s["queue_id"], s["queue_offset"]), s
        assert s["msg_id"] in props_text and s["key"] in props_text, s
    broker_min = int(segments(broker_dir)[0])
    assert sum(s["offset"] < broker_min for s in every) > 0      # the broker forgot these; the mirror did not

    # the CommitLog, the consume queues and the index files byte-identical where both hold them
    snap = manifest.load_snapshot(storage.Store(store))
    compared = 0
    for r in snap.of_kind("commitlog"):
        p = os.path.join(broker_dir, r["path"])
        if os.path.exists(p):
            n = r["valid_bytes"]
            assert open(p, "rb").read()[:n] == open(os.path.join(store, r["path"]), "rb").read()[:n], r["path"]
            compared += 1
    assert compared >= 1
    assert same_queue_units(broker_dir, store) > 0
    # verify, inspect and a key query on the mirror
    r = rocketlake("verify", "--store", store, "--deep")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    gone = next(s for s in every if s["offset"] < broker_min)
    r = rocketlake("query", "--store", store, "key", "--topic", gone["topic"], "--key", gone["key"])
    assert r.returncode == 0 and gone["msg_id"] in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]

    # restore: a broker on the export of a middle batch serves exactly what the mirror held then
    mid = snap.batches[len(snap.batches) // 2]
    out = str(tmp_path / "restored")
    r = rocketlake("export", "--store", store, "--as-of-batch", mid["batch_id"], "--to", out)
    assert r.returncode == 0, r.stderr[-2000:]
    want = {(v[0], v[1], v[2]) for off, v in recs.items() if off < mid["max_phy_offset"] and v[0] in TOPICS}
    assert {(s["topic"], s["queue_id"], s["queue_offset"]) for s in every
            if s["offset"] < mid["max_phy_offset"]} <= want
    got = set()
    with Broker(out, str(tmp_path / "r"), SIZES) as b:
        b.ask("topics", ",".join(TOPICS), QUEUES)      # config/ comes from the broker's own backup
        for t in TOPICS:
            _, msgs, _ = b.consume(t, QUEUES)
            got |= {(m["topic"], m["queue_id"], m["queue_offset"]) for m in msgs}
    assert got == want

    # a swapped or damaged broker directory: exit 3, the mirror as it was
    def state():
        return {p: os.path.getsize(os.path.join(d, p)) for d, _, fs in os.walk(store) for p in fs}
    before = state()
    r = rocketlake("mirror", "--from", out, "--store", store, "--once")
    assert r.returncode == 3 and "offset" in r.stderr, r.stderr[-2000:]
    damaged = str(tmp_path / "damaged")
    shutil.copytree(broker_dir, damaged)
    end = snap.batch["max_phy_offset"]
    last_seg = os.path.join(damaged, "commitlog", f"{(end - 1) // SIZES['mappedFileSizeCommitLog'] * SIZES['mappedFileSizeCommitLog']:020d}")
    raw = bytearray(open(last_seg, "rb").read())
    raw[(end - 1) % SIZES["mappedFileSizeCommitLog"] - 50] ^= 0x5A     # under the mirror's last record
    open(last_seg, "wb").write(bytes(raw))
    r = rocketlake("mirror", "--from", damaged, "--store", store, "--once")
    assert r.returncode == 3 and "offset" in r.stderr, r.stderr[-2000:]
    assert state() == before


DELAY_TOPIC, TRANS_TOPIC, TIMER_REAL = "mirror_delayed", "mirror_tx", "mirror_timer"
SPECIALS = int(os.environ.get("ROCKETLAKE_MIRROR_SPECIALS", "40"))
SYSTEM_TOPICS = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer")
# the timer wheel on (a broker's default; BrokerCheck turns it off), check-backs every second
SPECIAL_BROKER = {"timerWheelEnable": "true", "broker.transactionCheckInterval": 1000,
                  "broker.transactionTimeOut": 1000}


def special_lines(path: str) -> list:
    out = []
    for line in open(path, encoding="utf-8"):
        f = line.rstrip("\n").split("\t")
        if len(f) == 9:
            # (a transactional SendResult names no offset: offsetMsgId null)
            out.append({"kind": f[0], "i": int(f[1]), "offset": int(f[5][-16:], 16) if f[5] != "null" else None,
                        "key": f[7], "what": f[8]})
    return out


def props_of(text: str) -> dict:
    return dict(kv.split("\x01", 1) for kv in text.split("\x02") if "\x01" in kv)


def served_by_export(tmp_path, store: str, batch: dict, name: str, topics: str, want_delayed: set,
                     want_timer: set) -> tuple:
    """A fresh broker on ``export --as-of-batch`` of ``batch``: once the scheduled messages it has
    to deliver (``want_*``) are all there, and a while longer (for any it delivers again): how
    often each key was served in the delay, timer and transaction topics, and the export's summary."""
    out = str(tmp_path / name)
    r = rocketlake("export", "--store", store, "--as-of-batch", batch["batch_id"], "--to", out)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout.split("rocketlake: ", 1)[1])
    counts = {}
    with Broker(out, str(tmp_path / (name + "-broker")), {**SIZES, **SPECIAL_BROKER}) as b:
        b.ask("topics", topics, QUEUES)

        def served():
            for t in (DELAY_TOPIC, TIMER_REAL, TRANS_TOPIC):
                counts[t] = collections.Counter(m["properties"]["KEYS"] for m in b.consume(t, QUEUES)[1])
            return want_delayed <= set(counts[DELAY_TOPIC]) and want_timer <= set(counts[TIMER_REAL])
        wait_until(f"the broker on the export of {batch['batch_id']} to deliver what was due", served, timeout=60)
        time.sleep(6)                           # ScheduleMessageService and the timer wheel: anything more
        served()
    return counts, summary


def test_mirror_holds_delay_and_transaction_messages(tmp_path):
    """Delay-level, timer and transactional messages (half, then commit or rollback at once, or
    through the broker's check-back: commit, rollback, unknown for ever) from RocketMQ's own
    clients while the mirror runs: the mirror holds the broker's records of them byte for byte
    (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer, the delivered copies, the half and op topics, the
    committed copies), their queue units identical. A broker started on the export of a batch
    while some scheduled messages were still due, and one on the last batch, each serve every
    delay-level message exactly once (the export's config/delayOffset.json), every timer message
    (once for the last batch: config/timercheck), and exactly the transactional messages committed
    as of that batch (the broker's committed copies, as many as it wrote): none rolled back, none
    whose check-back had not committed it."""
    broker_dir, store = str(tmp_path / "broker"), str(tmp_path / "mirror")
    os.makedirs(broker_dir)
    sent, fence = str(tmp_path / "specials.tsv"), str(tmp_path / "fence.tsv")
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SIZES.items()))
    topics = ",".join(TOPICS + [DELAY_TOPIC, TRANS_TOPIC, TIMER_REAL])
    log = open(tmp_path / "mirror.log", "w")
    mirror = None
    try:
        with Broker(broker_dir, str(tmp_path / "a"), {**SIZES, **FLUSH, **SPECIAL_BROKER}) as b:
            mirror = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker_dir,
                                       "--store", store, "--every", "1", "--quiet", "--config", str(props)],
                                      stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=ROOT),
                                      cwd=ROOT, start_new_session=True)
            b.ask("topics", topics, QUEUES)
            b.ask("specials", sent, SPECIALS, 0, DELAY_TOPIC, TRANS_TOPIC, TIMER_REAL)
            time.sleep(10)                                  # every delay and timer message due and delivered,
            b.ask("produce", fence, 20, 10_000, ",".join(TOPICS))      # every check-back answered; later records
            time.sleep(1.5)                                            # move the safe point past them
            b.ask("stopproduce")
            first_fence = min(s["offset"] for s in sent_lines(fence))     # (the newest record waits for a later one)
            wait_until("the mirror to pass the fence", lambda: mirror_end(store) > first_fence)
            time.sleep(1)                                   # the broker's dispatch of the last ones
            units = queue_units_by_topic(broker_dir, store)
        assert mirror.poll() is None, open(tmp_path / "mirror.log").read()[-3000:]
    finally:
        if mirror is not None:
            if mirror.poll() is None:
                os.killpg(mirror.pid, signal.SIGTERM)
            mirror.wait(timeout=120)
        log.close()
    specials = special_lines(sent)
    by_kind = {k: [s for s in specials if s["kind"] == k] for k in ("delay", "trans", "timer", "check")}
    assert all(len(v) == SPECIALS for v in by_kind.values()), {k: len(v) for k, v in by_kind.items()}
    delays, trans, timers, checks = by_kind["delay"], by_kind["trans"], by_kind["timer"], by_kind["check"]
    committed = {s["key"] for s in trans if s["what"] == "COMMIT"} | \
        {s["key"] for s in checks if s["what"] == "CHECK_COMMIT"}

    recs = mirror_records(store)
    by_topic: dict = {}
    for off, (topic, qid, _qoff, text) in recs.items():
        by_topic.setdefault(topic, []).append((off, qid, props_of(text)))
    keys = {t: sorted(p.get("KEYS", "") for _, _, p in v) for t, v in by_topic.items()}
    # the broker's records of every acknowledged one, where its SendResult put them
    for s in delays:
        topic, qid, _, text = recs[s["offset"]]
        assert topic == "SCHEDULE_TOPIC_XXXX" and qid == int(s["what"]) - 1, (s, topic, qid)
        assert props_of(text)["REAL_TOPIC"] == DELAY_TOPIC
    for s in timers:
        topic, _, _, text = recs[s["offset"]]
        assert topic == "rmq_sys_wheel_timer" and props_of(text)["REAL_TOPIC"] == TIMER_REAL, (s, topic)
    assert keys[DELAY_TOPIC] == sorted(s["key"] for s in delays)               # every one delivered, once
    assert keys[TIMER_REAL] == sorted(s["key"] for s in timers)
    # the committed ones, no other; a check-back may commit one more than once (the broker checks
    # the half again before it sees the op message of the first commit): the broker's copies, as they are
    assert set(keys[TRANS_TOPIC]) == committed
    assert all(keys[TRANS_TOPIC].count(s["key"]) == 1 for s in trans if s["what"] == "COMMIT")
    # (a check-back puts the half message again: those of the check-back ones appear more than once)
    assert set(keys["RMQ_SYS_TRANS_HALF_TOPIC"]) == {s["key"] for s in trans + checks}
    assert "RMQ_SYS_TRANS_OP_HALF_TOPIC" in by_topic
    delivered = {p["KEYS"]: off for off, _, p in by_topic[DELAY_TOPIC]}
    assert all(delivered[s["key"]] > s["offset"] for s in delays)
    # byte for byte: the CommitLog the broker holds, and the queue units of every topic involved
    snap = manifest.load_snapshot(storage.Store(store))
    for r in snap.of_kind("commitlog"):
        n = r["valid_bytes"]
        assert open(os.path.join(broker_dir, r["path"]), "rb").read()[:n] == \
            open(os.path.join(store, r["path"]), "rb").read()[:n], r["path"]
    for t in SYSTEM_TOPICS + (DELAY_TOPIC, TRANS_TOPIC, TIMER_REAL):
        assert units.get(t, 0) > 0, (t, units)
    assert units["SCHEDULE_TOPIC_XXXX"] == SPECIALS and units[DELAY_TOPIC] == SPECIALS
    assert units["rmq_sys_wheel_timer"] == SPECIALS and units[TIMER_REAL] == SPECIALS
    assert units["RMQ_SYS_TRANS_HALF_TOPIC"] >= 2 * SPECIALS and units[TRANS_TOPIC] == len(keys[TRANS_TOPIC])
    r = rocketlake("verify", "--store", store, "--deep")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    # restore, a batch while delay-level and timer messages were partly delivered: each delay-level
    # one exactly once (those delivered by the batch from the store, the others by the new broker)
    def held(batch, topic, kind=None):
        return {p["KEYS"] for off, _, p in by_topic[topic] if off < batch["max_phy_offset"]
                and (kind is None or p["KEYS"].startswith(kind))}
    sched = {p["KEYS"]: off for off, _, p in by_topic["SCHEDULE_TOPIC_XXXX"]}

    def partly(b, entries, copies):
        return len(held(b, entries)) > len(held(b, copies)) > 0
    delay_mid = [b for b in snap.batches if partly(b, "SCHEDULE_TOPIC_XXXX", DELAY_TOPIC)]
    timer_mid = [b for b in snap.batches if partly(b, "rmq_sys_wheel_timer", TIMER_REAL)]
    assert delay_mid and timer_mid, [b["max_phy_offset"] for b in snap.batches]
    both = [b for b in delay_mid if b in timer_mid]
    for k, mid in enumerate(both[:1] or [delay_mid[0], timer_mid[0]]):
        want_delayed = {key for key, off in sched.items() if off < mid["max_phy_offset"]}
        want_timer = held(mid, "rmq_sys_wheel_timer")
        counts, summary = served_by_export(tmp_path, store, mid, f"restored-mid{k}", topics, want_delayed, want_timer)
        print(f"restored at {mid['batch_id']}: {summary}; delayed served {sum(counts[DELAY_TOPIC].values())} "
              f"for {len(want_delayed)}, timer {sum(counts[TIMER_REAL].values())} for {len(want_timer)}")
        assert dict(counts[DELAY_TOPIC]) == {key: 1 for key in want_delayed}
        # every timer message; one delivered by the batch after one that was not, a second time
        assert set(counts[TIMER_REAL]) == want_timer and set(counts[TIMER_REAL].values()) <= {1, 2}
        # the committed copies as of the batch, no other: a half still unresolved then stays a half message
        assert counts[TRANS_TOPIC] == collections.Counter(p["KEYS"] for off, _, p in by_topic[TRANS_TOPIC]
                                                          if off < mid["max_phy_offset"])

    # restore, the last batch: every scheduled message delivered once, the committed ones alone
    counts, summary = served_by_export(tmp_path, store, snap.batch, "restored", topics,
                                       {s["key"] for s in delays}, {s["key"] for s in timers})
    print(f"restored at the last batch: {summary}")
    assert summary["delay_offsets"] == {"1": SPECIALS // 2, "2": SPECIALS // 2} and summary["timer_offset"] == SPECIALS
    assert dict(counts[DELAY_TOPIC]) == {s["key"]: 1 for s in delays}
    assert dict(counts[TIMER_REAL]) == {s["key"]: 1 for s in timers}
    assert counts[TRANS_TOPIC] == collections.Counter(keys[TRANS_TOPIC]) and set(counts[TRANS_TOPIC]) == committed
    unresolved = {s["key"] for s in checks if s["what"] == "CHECK_UNKNOWN"}
    assert unresolved and not unresolved & set(counts[TRANS_TOPIC])
    assert all(m.startswith("delay-") for m in counts[DELAY_TOPIC])
