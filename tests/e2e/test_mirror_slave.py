"""Seeding a new slave of a running RocketMQ 5.3.3 master from the mirror (docs/OPERATIONS.md,
"Seeding a slave").

A master (ASYNC_MASTER, RocketMQ's own HA service on 127.0.0.1, an ephemeral HA port registered
with the name server) takes messages from RocketMQ's producer over three topics of four queues,
64 KiB CommitLog segments; ``rocketlake mirror --once`` backs its store up, ``rocketlake export``
writes the latest batch into a fresh directory, and a SLAVE (same brokerName, brokerId 1, the
master's name server: it learns the HA address from its registration, as 5.x does) starts on it.
The slave reports the seed's end as its max offset; the master sends what lies past it, and the
messages sent then. Then:

* the slave's CommitLog reaches the master's max offset, and after both stopped cleanly every
  CommitLog segment, consume-queue file and index file of the two stores is byte-identical (the
  slave's queues and index for the seeded range are rocketlake's, the rest its own dispatch);
* with the master stopped, the slave serves every message sent, exactly those (pulls sent to the
  slave: slave read), with the queue offset, ids, body, key and tag the producer saw.

Beside it, a second slave (brokerId 2) on a seed that is no prefix of the master's CommitLog: the
export of another broker's mirror (the small-roll golden store, RocketMQ's own files, cut at a
record below the master's end). RocketMQ's HA compares offsets only: the slave is not refused
nor truncated, it appends the master's bytes from the seed's end on (mid-record in the master's
CommitLog) and reaches the master's max offset, while its dispatch stops at the seed's end: none
of the master's messages is served, and only its shutdown says so (the abort file kept).

About two minutes (three broker JVMs, each stopped cleanly): ``make mirror`` (ROCKETLAKE_MIRROR=1).
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import golden_set
from support import goldenlib, mirrorhelp
from support.rmqbroker import Broker

from storelib.format import indexfile
from storelib.io import storage
from storelib.ops import mirror, scheduled
from storelib.table import export, manifest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("ROCKETLAKE_MIRROR"), reason="make mirror (ROCKETLAKE_MIRROR=1)")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPICS = ["seed_orders", "seed_payments", "seed_audit"]
QUEUES = 4
# the small-roll golden set's sizes (RocketMQ 5.3.3's own files): the other broker of a foreign seed
SEGMENT = 65536
SIZES = {"mappedFileSizeCommitLog": SEGMENT, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64,
         "maxIndexNum": 256}
FLUSH = {"flushCommitLogThoroughInterval": 200, "flushConsumeQueueThoroughInterval": 200,
         "flushIntervalConsumeQueue": 200}
RATE, SECONDS = 400.0, 4.0


def rocketlake(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storelib.cli.main", *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)


def sent_lines(path: str) -> dict:
    """(topic, queue id, queue offset) -> what the producer's SendResult said of each message."""
    out = {}
    for line in open(path, encoding="utf-8"):
        i, topic, qid, qoff, offset_msg_id, msg_id, key, tag = line.rstrip("\n").split("\t")
        out[(topic, int(qid), int(qoff))] = {"i": int(i), "offset_msg_id": offset_msg_id, "msg_id": msg_id,
                                             "key": key, "tag": tag}
    return out


def body_of(i: int) -> bytes:
    """Producing.java's body of message ``i``."""
    return (f"message {i} " + "".join(chr(ord("a") + k % 26) for k in range(10 + i % 100))).encode()


def send(b: Broker, sent: str, first: int) -> int:
    """RocketMQ's producer at RATE for SECONDS, every send acknowledged; the next message number."""
    b.ask("produce", sent, RATE, first, ",".join(TOPICS))
    time.sleep(SECONDS)
    n_sent, failed, nxt = b.ask("stopproduce")[0].split("\t")[1:]
    assert int(n_sent) > RATE * SECONDS / 2 and int(failed) == 0, (n_sent, failed)
    return int(nxt)


def wait_until(what, cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def files(root: str, sub: str) -> dict:
    """relative path -> bytes of every file under root/sub."""
    out = {}
    for d, _, names in os.walk(os.path.join(root, sub)):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def index_by_header(root: str) -> dict:
    """(begin offset, begin time) -> bytes of every index file (a broker names them by the wall clock)."""
    out = {}
    for raw in files(root, "index").values():
        h = indexfile.IndexHeader.parse(raw[:indexfile.HEADER_SIZE])
        out[(h.begin_phy_offset, h.begin_timestamp)] = raw
    return out


def foreign_seed(base, below: int) -> tuple[str, int]:
    """The export of another broker's mirror (the small-roll golden store, mirrored up to a record
    ending below ``below``): its directory and end."""
    broker = goldenlib.restore(golden_set("small-roll"), str(base / "other-broker"))
    phys, _, ts = mirrorhelp.records(broker)
    mirrorhelp.set_safe(broker, int(ts[int(np.searchsorted(phys, below // 2))]))
    other = str(base / "other-mirror")
    assert mirror.mirror_broker(broker, other, quiet=True)["status"] == "committed"
    out = str(base / "foreign-slave")
    export.export_store(other, out, durable=False, config_files=scheduled.export_config_files)
    return out, manifest.load_snapshot(storage.Store(other)).batch["max_phy_offset"]


def test_slave_seeded_from_the_mirror(tmp_path):
    master_dir, slave_dir, store = str(tmp_path / "master"), str(tmp_path / "slave"), str(tmp_path / "mirror")
    os.makedirs(master_dir)
    sent = str(tmp_path / "sent.tsv")
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SIZES.items()))
    master = Broker(master_dir, str(tmp_path / "m"), {**SIZES, **FLUSH}, ha=True)
    with master:
        ns, _, ha_port = master.addresses
        assert int(ha_port) > 0
        master.ask("topics", ",".join(TOPICS), QUEUES)
        nxt = send(master, sent, 0)
        time.sleep(1)                           # flushed, and the checkpoint's safe point past them
        r = rocketlake("mirror", "--from", master_dir, "--store", store, "--once", "--quiet", "--config", str(props))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        seed_end = manifest.load_snapshot(storage.Store(store)).batch["max_phy_offset"]
        assert seed_end > 2 * SEGMENT and seed_end <= master.offsets()[1]
        r = rocketlake("export", "--store", store, "--to", slave_dir)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        fdir, fend = foreign_seed(tmp_path, seed_end)
        assert 0 < fend < seed_end

        def slave_of_master(root, work, broker_id):
            return Broker(root, str(tmp_path / work), {**SIZES, **FLUSH, "brokerRole": "SLAVE",
                                                       "broker.brokerId": broker_id, "broker.slaveReadEnable": "true",
                                                       "namesrv": ns}, ha=True)
        slave, foreign = slave_of_master(slave_dir, "s", 1), slave_of_master(fdir, "f", 2)
        with slave, foreign:
            for b in (slave, foreign):
                b.ask("topics", ",".join(TOPICS), QUEUES)
            send(master, sent, nxt)
            end = master.offsets()[1]
            assert end > seed_end + SEGMENT                   # the slave rolls segments of its own
            for b in (slave, foreign):
                wait_until("a slave to reach the master's max offset", lambda b=b: b.offsets()[1] == end)
            master.stop()
            # slave read, the master gone: every message sent, no other
            want = sent_lines(sent)
            got = {}
            for t in TOPICS:
                _, msgs, other = slave.consume(t, QUEUES)
                assert not [x for x in other if not x.startswith(("route", "pull"))], other
                for m in msgs:
                    got[(m["topic"], m["queue_id"], m["queue_offset"])] = m
                # the foreign seed's slave: not one of them
                queues, msgs, _ = foreign.consume(t, QUEUES)
                assert not msgs and set(queues.values()) == {(0, 0)}, (t, queues)
        assert set(got) == set(want) and len(want) > 2 * RATE * SECONDS / 2
        for k, s in want.items():
            m = got[k]
            assert (m["offset_msg_id"], m["msg_id"], m["body"]) == (s["offset_msg_id"], s["msg_id"], body_of(s["i"])), k
            assert (m["properties"]["KEYS"], m["properties"]["TAGS"]) == (s["key"], s["tag"]), k
            assert int(s["offset_msg_id"][-16:], 16) == m["commitlog_offset"]

    # each slave recovered its seed as it is and asked the master for what lies past its end
    ha_log = "".join(open(p, encoding="utf-8", errors="replace").read()
                     for p in glob.glob(str(tmp_path / "m" / "home" / "logs" / "rocketmqlogs" / "*.log")))
    for at in (seed_end, fend):
        assert f"master transfer data from {at} to slave" in ha_log, at
    # all stopped cleanly (flushed): the same CommitLog, consume queues and index files
    master_log, slave_log = files(master_dir, "commitlog"), files(slave_dir, "commitlog")
    assert len(master_log) >= 8 and sorted(master_log) == sorted(slave_log)
    for name, raw in master_log.items():
        assert raw == slave_log[name], name
    master_cq, slave_cq = files(master_dir, "consumequeue"), files(slave_dir, "consumequeue")
    assert sorted(master_cq) == sorted(slave_cq)
    for name, raw in master_cq.items():
        assert raw == slave_cq[name], name
    master_ix, slave_ix = index_by_header(master_dir), index_by_header(slave_dir)
    assert len(master_ix) >= 2 and sorted(master_ix) == sorted(slave_ix)
    for k, raw in master_ix.items():
        assert raw == slave_ix[k], k
    # the foreign one: the other broker's bytes up to the seed's end, the master's past it; its
    # dispatch never passed the seed's end, which only its shutdown noticed
    theirs = b"".join(raw for _, raw in sorted(files(str(tmp_path / "other-broker"), "commitlog").items()))
    spliced = b"".join(raw for _, raw in sorted(files(fdir, "commitlog").items()))
    whole = b"".join(raw for _, raw in sorted(master_log.items()))
    assert spliced[:fend] == theirs[:fend] and spliced[fend:end] == whole[fend:end]
    assert whole[:fend] != theirs[:fend]
    assert not os.path.exists(os.path.join(slave_dir, "abort")) and os.path.exists(os.path.join(fdir, "abort"))
