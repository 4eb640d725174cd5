"""A real RocketMQ 5.3.3 broker serves a store whose consume queues, index files and checkpoint
were lost and rebuilt by ``repair`` from the CommitLog alone.

small-roll as RocketMQ wrote it (3,000 messages, 64 KiB segments; PREPARED/COMMIT/ROLLBACK, delay
messages, IPv6 hosts, long topics) loses its whole ``consumequeue/`` and ``index/`` and gets a
zeroed checkpoint; ``jobs/repair.py --apply`` rebuilds them byte for byte; a broker opens the
store, its consumer reads every queue from its min offset and gets every message, and its
queryMessage / viewMessageById answers are the set's recorded ones. While the broker runs, its
lock on the store refuses a repair. And the default-size set (a 1 GiB segment, 6 MB queue files,
one 420 MB index file) with queue files, its index file and the checkpoint damaged, repaired byte
for byte, with the repair's and ``verify --deep``'s times side by side.
"""
from __future__ import annotations

import os
import shutil

import pytest

from support import goldenlib
from support.opshelp import run, small_properties
from support.rmqbroker import Broker

from test_rocketmq_broker import broker_topics, check_queries, consume_all, expected, golden_store

# Two minutes of a broker JVM, plus the default-size set (2 GB sparse): `make repair-fidelity`.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("ROCKETLAKE_REPAIR_FIDELITY"),
                                 reason="make repair-fidelity runs these (ROCKETLAKE_REPAIR_FIDELITY=1)")]


def test_broker_serves_a_repaired_store(tmp_path):
    g, store = golden_store(tmp_path)
    shutil.rmtree(os.path.join(store, "consumequeue"))
    shutil.rmtree(os.path.join(store, "index"))
    with open(os.path.join(store, "checkpoint"), "r+b") as fh:
        fh.write(bytes(64))
    props = small_properties(tmp_path)
    dry = run("repair.py", "--store", store, "--config", props)
    assert dry.returncode == 1 and dry.stdout.count("missing ") > 100, dry.stderr
    res = run("repair.py", "--store", store, "--config", props, "--apply")
    assert res.returncode == 0, res.stderr
    assert goldenlib.compare(g, store) == []

    _, _, queues = expected(g, 3000)
    broker_topics(store, queues)
    import json
    cfg = json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"]
    broker_cfg = {k: v for k, v in cfg.items() if k != "flushDiskType"}
    with Broker(store, str(tmp_path / "broker"), broker_cfg) as b:
        locked = run("repair.py", "--store", store, "--config", props, "--apply")
        assert locked.returncode == 3 and "running broker" in locked.stderr, locked.stderr
        n = consume_all(b, queues)
        nq = check_queries(b, g)
    assert n == sum(len(v) for v in queues.values()) and nq > 10


def test_broker_serves_a_directory_adopted_in_place(tmp_path):
    """A directory without a ``lock`` adopted in place: the lock the adopt made stays, empty, a
    broker starts on the directory (on that very file) and serves every message, and an in-place
    adopt while it runs is refused by the broker's own lock (BrokerRunning)."""
    import json
    from storelib import errors
    from storelib.ops import adopt
    from support.opshelp import small_config
    g, store = golden_store(tmp_path)
    os.remove(os.path.join(store, "lock"))
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"
    assert os.path.getsize(os.path.join(store, "lock")) == 0
    _, _, queues = expected(g, 3000)
    broker_topics(store, queues)
    cfg = json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"]
    with Broker(store, str(tmp_path / "broker"), {k: v for k, v in cfg.items() if k != "flushDiskType"}) as b:
        with pytest.raises(errors.BrokerRunning):
            adopt.adopt(None, store, store, small_config(), quiet=True)
        n = consume_all(b, queues)
    assert n == sum(len(v) for v in queues.values())


def test_default_size_store_repaired(tmp_path):
    import time
    from storelib.ops import repair as repair_op
    from storelib.verify import driver as verify
    g = goldenlib.resolve_set("default-size")
    store = goldenlib.restore(g, str(tmp_path / "store"), verify=False)
    cq = sorted(os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(os.path.join(store, "consumequeue"))
                for f in fs)
    os.remove(os.path.join(store, cq[0]))
    with open(os.path.join(store, cq[1]), "r+b") as fh:
        fh.seek(20 * 17 + 3)
        fh.write(b"\x5a")
    with open(os.path.join(store, cq[2]), "r+b") as fh:
        fh.truncate(4000)
    idx = os.path.join(store, "index", sorted(os.listdir(os.path.join(store, "index")))[0])
    with open(idx, "r+b") as fh:
        fh.seek(40 + 4 * 12345)
        fh.write(b"\x00\x00\x00\x07")
    with open(os.path.join(store, "checkpoint"), "r+b") as fh:
        fh.write(bytes(8))
    t0 = time.time()
    s = repair_op.repair(store, apply=True, quiet=True)
    t_repair = time.time() - t0
    assert sorted(s["replaced"]) == sorted([cq[0], cq[1], cq[2], os.path.relpath(idx, store), "checkpoint"])
    assert goldenlib.compare(g, store) == []
    t0 = time.time()
    assert verify.verify_store(store, deep=True).problems == []
    t_verify = time.time() - t0
    print(f"default-size: repair (dry-run + apply) {t_repair:.1f}s, verify --deep {t_verify:.1f}s")
