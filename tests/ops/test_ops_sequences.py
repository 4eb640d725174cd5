"""Random sequences of operations against a model of which messages must be readable (issue 35,
"What to build"): ingest / append, expire store-wide and per topic, repair after random damage
to derived files, export, verify, on a small store (64 KiB segments, 30-unit queue files,
255-entry index files), all in this process (no Spark).

After every step ``verify`` is clean and exactly the model's messages read back, queue by queue
(``get_by_queue_offset`` from each queue's minimum offset to its maximum). The model: an ingest
appends its messages at the next offsets of their queues; an expiry removes what lies below the
new minimum physical offset and, per topic, below each queue's new minimum offset, as its summary
reports them, and never a message newer than its rule's cutoff; repair and export change nothing
of it; an export reads back as the store does and verifies clean (deep).
A repair may refuse one damage only: a queue file damaged in units whose records an expiry deleted
(only the file held them), or an index file once an expiry deleted the commitlog's first segment
(index files are derived only from a commitlog that starts at 0): it names that file and changes
nothing, and with the file restored from a copy the store needs no repair.

A seeded generator: ``make test`` runs a few sequences (SEEDS), ``ROCKETLAKE_LONG=1`` (``make
long``, ``make ops-sequences``) thousands (``ROCKETLAKE_OPS_SEQUENCES``, default 2000). A failing
sequence prints its seed and steps; rerun one with ``ROCKETLAKE_OPS_SEED=<seed>``;
``ROCKETLAKE_OPS_LOG=<file>`` appends every passing sequence's steps to a file.
"""
from __future__ import annotations

import base64
import json
import os
import random
import shutil

import pytest

from support.opshelp import small_config
from storelib.errors import RepairRefused
from storelib.format import consumequeue
from storelib.io import storage
from storelib.table import manifest

T0 = 1717200000000
HOUR = 3600 * 1000
TOPICS = {"orders": 2, "refund": 3, "audit_log": 1}            # topic -> queues
STEPS = 8

if os.environ.get("ROCKETLAKE_OPS_SEED"):
    SEEDS = [int(os.environ["ROCKETLAKE_OPS_SEED"])]
elif os.environ.get("ROCKETLAKE_LONG"):
    SEEDS = list(range(int(os.environ.get("ROCKETLAKE_OPS_SEQUENCES", "2000"))))
else:
    SEEDS = [11, 23, 37]


class Sequence:
    def __init__(self, seed: int, tmp):
        self.rng = random.Random(seed)
        self.tmp = tmp
        self.store = str(tmp / "store")
        self.model: dict = {}           # (topic, queue id, queue offset) -> (body, store time)
        self.next_offset: dict = {}     # (topic, queue id) -> next queue offset
        self.clock = T0
        self.n = 0
        self.log: list = []

    # ------------------------------------------------------------------ steps
    def ingest(self):
        from storelib.ingest.driver import run_ingest
        from storelib.runtime.localrun import LocalSession
        count = self.rng.choice([1, 7, 40, 120, 300])
        self.clock += self.rng.choice([1, 2, 5, 12]) * HOUR
        path = str(self.tmp / f"in-{self.n}.jsonl")
        rows = []
        for i in range(count):
            topic = self.rng.choice(sorted(TOPICS))
            qid = self.rng.randrange(TOPICS[topic])
            body = f"seq-{self.n}-{i}-{'x' * self.rng.randrange(0, 400)}".encode()
            ts = self.clock + i
            rows.append({"topic": topic, "queue_id": qid, "flag": 0, "sys_flag": 0, "born_timestamp": ts - 5,
                         "store_timestamp": ts, "born_host": "10.0.0.7:50123", "store_host": "192.168.0.10:10911",
                         "reconsume_times": 0, "prepared_transaction_offset": 0,
                         "body_b64": base64.b64encode(body).decode(),
                         "properties": [["KEYS", f"k{self.n}-{i}"], ["UNIQ_KEY", f"U{self.n:04d}{i:06d}"]]})
            off = self.next_offset.get((topic, qid), 0)
            self.next_offset[(topic, qid)] = off + 1
            self.model[(topic, qid, off)] = (body, ts)
        with open(path, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
        self.clock += count
        s = run_ingest(LocalSession(), self.store, path, "jsonl", small_config(), quiet=True)
        assert s["status"] == "committed", s
        os.remove(path)
        return f"ingest {count}"

    def _expired(self, summary: dict, hours_of) -> None:
        """Drop from the model what the expiry's summary says is gone; nothing newer than its rule."""
        reader = self.reader()
        min_phy = summary["min_phy_offset"]
        qmin = {(q["topic"], q["queue_id"]): q["min_offset"] for q in summary.get("queue_min_offsets", [])}
        gone = []
        for key, (_body, ts) in list(self.model.items()):
            phys = self.phys.get(key)
            if (phys is not None and phys < min_phy) or key[2] < qmin.get(key[:2], 0):
                gone.append((key, ts))
        for key, ts in gone:
            hours = hours_of(key[0])
            assert hours is not None and ts <= summary["now_ms"] - hours * HOUR, \
                f"expire removed {key} (store time {ts}), newer than its rule ({hours} h before {summary['now_ms']})"
            del self.model[key]
        del reader

    def expire(self):
        from storelib.ops.expire import expire
        hours = self.rng.choice([0, 1, 3, 10, 30])
        now = self.clock + self.rng.choice([0, 1, 6, 24]) * HOUR
        self._remember_phys()
        s = expire(self.store, hours, now_ms=now, quiet=True, housekeeping=self.rng.random() < 0.3)
        self._expired(s, lambda _t: hours)
        return f"expire {hours}h @+{(now - self.clock) // HOUR}h: removed {len(s['removed'])}"

    def expire_topic(self):
        from storelib.ops.expire import expire
        topic = self.rng.choice(sorted(TOPICS))
        hours = self.rng.choice([0, 1, 3, 10])
        now = self.clock + self.rng.choice([0, 1, 6, 24]) * HOUR
        self._remember_phys()
        s = expire(self.store, None, now_ms=now, quiet=True, housekeeping=False, topic_rules={topic: hours})
        self._expired(s, lambda t: hours if t == topic else None)
        return f"expire --topic {topic} {hours}h: removed {len(s['removed'])}"

    def damage_and_repair(self):
        from storelib.ops.repair import repair
        snap = manifest.load_snapshot(storage.Store(self.store))
        victims = snap.of_kind("consumequeue") + snap.of_kind("index")
        row = self.rng.choice(victims)
        path = os.path.join(self.store, row["path"])
        how = self.rng.choice(["delete", "truncate", "zero-unit"] if row["kind"] == "consumequeue"
                              else ["delete", "truncate"])
        with open(path, "rb") as fh:
            good = fh.read()
        at = 0                          # the first damaged byte
        if how == "delete":
            os.remove(path)
        elif how == "truncate":
            at = self.rng.randrange(0, max(1, row["valid_bytes"]))
            with open(path, "r+b") as fh:
                fh.truncate(at)
        else:
            units = row["valid_bytes"] // consumequeue.UNIT_SIZE
            at = self.rng.randrange(units) * consumequeue.UNIT_SIZE
            with open(path, "r+b") as fh:
                fh.seek(at)
                fh.write(bytes(consumequeue.UNIT_SIZE))
        what = f"{how} {row['path']}, repair --apply"
        try:
            repair(self.store, apply=True, quiet=True)
        except RepairRefused as e:
            # Only the file holds units whose records an expiry deleted: damaged there, repair must
            # refuse it and change nothing; restored from a copy, the store is whole again.
            min_phy = snap.batch["min_phy_offset"] or 0
            if row["kind"] == "consumequeue":
                assert at < _expired_head(good[:row["valid_bytes"]], min_phy) * consumequeue.UNIT_SIZE, \
                    f"after {what}: refused {e}"
            else:                       # (index files are derived only from a commitlog starting at 0)
                assert min_phy > 0, f"after {what}: refused {e}"
            assert e.path == row["path"], f"after {what}: refused {e}"
            with open(path, "wb") as fh:
                fh.write(good)
            s = repair(self.store, apply=True, quiet=True)
            assert s["replaced"] == [], f"after {what}, refused and the file restored: repair replaced {s['replaced']}"
            what += f" refused ({e.path} not derivable), the file restored from a copy"
        return what

    def export(self):
        from storelib.ops import deepverify
        from storelib.table.export import export_store
        out = str(self.tmp / f"export-{self.n}")
        export_store(self.store, out)
        rep = deepverify.verify_store(out, deep=True)
        assert rep.problems == [], rep.problems[:8]
        self.check(out)
        shutil.rmtree(out)
        return "export"

    # ------------------------------------------------------------------ checks
    def reader(self, store=None):
        from storelib.read.query import open_store
        return open_store(store or self.store)

    def _remember_phys(self):
        """Each model message's commitlog offset, read from the store before an expiry."""
        r = self.reader()
        self.phys = {}
        for (t, q), nxt in self.next_offset.items():
            lo = r.get_min_offset_in_queue(t, q)
            for m in r.get_by_queue_offset(t, q, lo, nxt - lo):
                self.phys[(t, q, m["queue_offset"])] = m["commitlog_offset"]

    def check(self, store=None):
        from storelib.verify.driver import verify_store
        store = store or self.store
        if store == self.store:
            rep = verify_store(store, threads=1)
            assert rep.problems == [], rep.problems[:8]
        r = self.reader(store)
        got = {}
        for (t, q), nxt in self.next_offset.items():
            lo, hi = r.get_min_offset_in_queue(t, q), r.get_max_offset_in_queue(t, q)
            assert hi == nxt, f"{t}/{q}: max offset {hi}, the model's {nxt}"
            for m in r.get_by_queue_offset(t, q, lo, hi - lo):
                got[(t, q, m["queue_offset"])] = (bytes(m["body"]), m["store_timestamp"])
        want = self.model
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
        assert not (missing or extra or wrong), \
            f"{len(missing)} missing {missing[:5]}, {len(extra)} not in the model {extra[:5]}, {len(wrong)} differ"

    def run(self, steps: int):
        ops = [(self.ingest, 4), (self.expire, 2), (self.expire_topic, 2), (self.damage_and_repair, 1),
               (self.export, 1)]
        self.log.append(self.ingest())
        self.check()
        for self.n in range(1, steps):
            op = self.rng.choices([o for o, _ in ops], [w for _, w in ops])[0]
            self.log.append(op())
            self.check()


def _expired_head(raw: bytes, min_phy: int) -> int:
    """How many leading units of a queue file point below the commitlog's min offset."""
    n = 0
    for i in range(0, len(raw) - consumequeue.UNIT_SIZE + 1, consumequeue.UNIT_SIZE):
        if consumequeue.parse_unit(raw[i:i + consumequeue.UNIT_SIZE])[0] >= min_phy:
            break
        n += 1
    return n


@pytest.mark.parametrize("seed", SEEDS)
def test_operation_sequence(tmp_path, seed):
    seq = Sequence(seed, tmp_path)
    try:
        seq.run(STEPS)
        if os.environ.get("ROCKETLAKE_OPS_LOG"):          # (each sequence's steps, one JSON line)
            with open(os.environ["ROCKETLAKE_OPS_LOG"], "a") as fh:
                fh.write(json.dumps({"seed": seed, "steps": seq.log}) + "\n")
    except BaseException as e:
        raise AssertionError(f"seed {seed}, steps {seq.log} + the failing one: {type(e).__name__}: {e}") from e
