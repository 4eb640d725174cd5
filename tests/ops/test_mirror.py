"""mirror: a broker's store (the small-roll golden set, written by RocketMQ 5.3.3's own store) grown
in steps by moving its checkpoint's physicMsgTimestamp (the safe point) and deleting its oldest
segments as its retention does; the mirror's cycles must rebuild RocketMQ's store byte for byte
(goldenlib.compare), verify, never touch the broker's directory, and stop with exit 3 and the
mirror unchanged on every kind of divergence. No Spark, no JVM: the real broker run is
tests/e2e/test_mirror_broker.py."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from support import goldenlib
from conftest import golden_set
from support.mirrorhelp import records as _records, set_safe
from storelib.cli import mirror as mirror_cli
from storelib.codec import messages as codec
from storelib.compute import kernels
from storelib.format import commitlog
from storelib.ops import mirror
from storelib.table import manifest
from storelib.io import storage
from storelib.verify import driver as verify

SET = "small-roll"


def tree(root: str, skip=("_rocketlake",)) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), root) not in skip]
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (hashlib.sha256(open(p, "rb").read()).hexdigest(), st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def golden_store(tmp_path_factory):
    return goldenlib.restore(golden_set(SET), str(tmp_path_factory.mktemp("golden")))


@pytest.fixture
def broker(golden_store, tmp_path):
    d = str(tmp_path / "broker")
    shutil.copytree(golden_store, d)
    return d


def test_cycles_rebuild_the_brokers_store_byte_for_byte(broker, tmp_path):
    """Four cycles, the broker deleting its 20 oldest segments after the second: each batch ends
    at the last record stored before the safe point, the mirror keeps what the broker deleted, and
    the result is RocketMQ's store byte for byte (CommitLog, every consume queue, every index
    file, the checkpoint) and verifies; the broker's directory is left as it was."""
    store = str(tmp_path / "mirror")
    phys, ends, ts = _records(broker)
    cuts = [int(ts[700]), int(ts[1500]), int(ts[2400]), int(ts.max()) + 1]
    for k, t in enumerate(cuts):
        if k == 2:
            for _base, rel in mirror.BrokerFiles(broker).segments()[:20]:
                os.remove(os.path.join(broker, rel))
        set_safe(broker, t)
        before = tree(broker)
        s = mirror.mirror_broker(broker, store, quiet=True)
        assert tree(broker) == before                 # read only: not a byte, not an mtime, no new file
        bad = np.flatnonzero((ts <= 0) | (ts >= t))
        want_end = int(ends[bad[0] - 1]) if len(bad) else int(ends[-1])
        assert s["status"] == "committed" and s["to"] == want_end, (k, s)
    assert goldenlib.compare(golden_set(SET), store) == []
    snap = manifest.load_snapshot(storage.Store(store))
    assert [b["batch_seq"] for b in snap.batches] == [1, 2, 3, 4]
    assert snap.batch["total_messages"] == len(phys)
    rep = verify.verify_store(store, None, deep=True)
    assert not rep.problems, rep.problems[:5]
    again = mirror.mirror_broker(broker, store, quiet=True)
    assert again["status"] == "nothing-new"


def test_safe_point_is_a_prefix_of_whole_records(broker):
    """Records at or after the first one stored at or after physicMsgTimestamp wait (store
    times can step back: the prefix stops at the first unsafe record), a torn tail (a record
    whose bytes are not all there yet) is never taken, and a BLANK comes only with a safe record
    of the next segment."""
    b = mirror.BrokerFiles(broker)
    phys, ends, ts = _records(broker)
    F = 65536
    for k in (1, 57, 600, 2999):
        pieces = mirror.safe_records(b, 0, int(ts[k]), F)
        got = np.concatenate([p.base + p.pos + p.starts for p in pieces]) if pieces else np.zeros(0)
        first_bad = int(np.flatnonzero(ts >= ts[k])[0])
        assert np.array_equal(got, phys[:first_bad])
        # a BLANK with a piece only when that piece's segment follows a closed one
        for p in pieces:
            assert (len(p.blank) == 8) == (p.base > 0 and p.pos == 0)
    assert mirror.safe_records(b, 0, 0, F) == []
    # a torn record: the tail of the newest record is not written yet
    last_base, last_rel = b.segments()[-1]
    path = os.path.join(broker, last_rel)
    raw = bytearray(open(path, "rb").read())
    a, e = int(phys[-1]) - last_base, int(ends[-1]) - last_base
    raw[a + 60:e] = bytes(e - a - 60)
    open(path, "wb").write(bytes(raw))
    pieces = mirror.safe_records(b, 0, int(ts.max()) + 1, F)
    assert pieces[-1].base + pieces[-1].pos + pieces[-1].end <= int(phys[-1])


def _damage(broker: str, how: str, mirror_end: int) -> None:
    b = mirror.BrokerFiles(broker)
    segs = b.segments()
    F = 65536
    if how == "another-broker":                  # same sizes, another first record
        p = os.path.join(broker, segs[0][1])
        raw = bytearray(open(p, "rb").read())
        raw[200] ^= 0xFF
        open(p, "wb").write(bytes(raw))
    elif how == "truncated-tail":                # recovery cut the tail under the mirror's end
        base = (mirror_end - 1) // F * F
        p = os.path.join(broker, f"commitlog/{base:020d}")
        raw = bytearray(open(p, "rb").read())
        cut = max(0, mirror_end - base - 300)
        raw[cut:] = bytes(len(raw) - cut)
        open(p, "wb").write(bytes(raw))
        for s, rel in segs:
            if s > base:
                os.remove(os.path.join(broker, rel))
    elif how == "replaced-file":                 # one segment under the mirror's end replaced
        base = (mirror_end - 1) // F * F
        p = os.path.join(broker, f"commitlog/{base:020d}")
        raw = bytearray(open(p, "rb").read())
        raw[mirror_end - base - 10] ^= 0x55
        open(p, "wb").write(bytes(raw))
    elif how == "segment-gone":                  # the segment under the mirror's end, alone, is gone
        os.remove(os.path.join(broker, f"commitlog/{(mirror_end - 1) // F * F:020d}"))
    elif how == "deleted-before-copied":         # retention ran past what the mirror holds
        for s, rel in segs:
            if s <= mirror_end + F:
                os.remove(os.path.join(broker, rel))
    elif how == "queue-restarted":               # deleteTopic, the topic created again: its queues from 0
        base = mirror_end // F * F
        p = os.path.join(broker, f"commitlog/{base:020d}")
        raw = bytearray(open(p, "rb").read())
        buf = np.frombuffer(bytes(raw), np.uint8)
        st, _, _ = codec.record_starts(buf, mirror_end - base, len(buf))
        qoff = kernels.record_fields(buf, np.asarray(st, np.int64))[kernels.F_QUEUEOFFSET]
        at = int(st[int(np.flatnonzero(qoff > 0)[0])]) + commitlog.POS_QUEUEOFFSET
        raw[at:at + 8] = bytes(8)
        open(p, "wb").write(bytes(raw))


# what each divergence's line says besides the offset: its cause, and what an operator can do
SAYS = {"queue-restarted": ("deleted the topic and it was created again", "can no longer be mirrored",
                            "ingest --from-store"),
        "deleted-before-copied": ("never copied", "can no longer be mirrored", "ingest --from-store")}


@pytest.mark.parametrize("how", ["another-broker", "truncated-tail", "replaced-file", "segment-gone",
                                 "deleted-before-copied", "queue-restarted"])
def test_divergence_stops_with_exit_3_and_leaves_the_mirror(broker, tmp_path, capsys, how):
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1200]))
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 0
    end = manifest.load_snapshot(storage.Store(store)).batch["max_phy_offset"]
    set_safe(broker, int(ts.max()) + 1)
    _damage(broker, how, end)
    before = tree(store, skip=())
    capsys.readouterr()
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "offset" in err[0] and ("new mirror" in err[0] or "new store" in err[0]), err
    assert all(words in err[0] for words in SAYS.get(how, ())), err
    assert tree(store, skip=()) == before


def test_a_mirror_starts_at_the_brokers_first_record(broker, tmp_path, capsys):
    """A broker that already deleted its first segment, a store that is not a mirror, a path
    that is no broker store: exit 2, nothing written."""
    os.remove(os.path.join(broker, mirror.BrokerFiles(broker).segments()[0][1]))
    store = str(tmp_path / "m")
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 2
    assert "starts at 65536" in capsys.readouterr().err
    assert not os.path.exists(store)
    assert mirror_cli.main(["--from", str(tmp_path), "--store", store, "--quiet"]) == 2
    assert not os.path.exists(store)


def test_a_mirror_into_a_brokers_directory_is_refused(broker, tmp_path, capsys):
    """--store naming a directory that already holds RocketMQ files (another broker's, a copy of
    this one): exit 2, one line saying a new store starts in an empty or absent directory, that
    directory unchanged (on the base: exit 1, only advising an import, whose store no mirror may
    then continue)."""
    other = str(tmp_path / "other")
    shutil.copytree(broker, other)
    before = tree(other)
    code = mirror_cli.main(["--from", broker, "--store", other, "--once", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "starts in an empty or absent directory" in err, (code, err)
    assert tree(other) == before


def test_once_catches_up_in_bounded_batches(broker, tmp_path, capsys):
    store = str(tmp_path / "m")
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet", "--max-batch-mb", "1"]) == 0
    snap = manifest.load_snapshot(storage.Store(store))
    assert len(snap.batches) >= 4                # 3.6 MB of records, at most about 1 MiB a batch
    _, ends, ts = _records(broker)
    first_unsafe = int(np.flatnonzero(ts >= mirror.BrokerFiles(broker).physic_timestamp())[0])
    assert snap.batch["max_phy_offset"] == ends[first_unsafe - 1]
    assert capsys.readouterr().out.count("rocketlake: ") == len(snap.batches)    # the last batch was a short one


@pytest.mark.spark
def test_spark_reads_and_tails_the_mirror_while_it_runs(spark, broker, golden_store, tmp_path):
    """``readStream.format("rocketmq")`` over the mirror while its cycles commit: every message once,
    in commitlog order per micro-batch; ``read.format("rocketmq")`` of the mirror is the broker's store's."""
    from storelib.read import datasource, stream
    datasource.register(spark)
    stream.register(spark)
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    seen = []

    def each(df, epoch):
        seen.extend(sorted((r.commitlog_offset, r.topic, bytes(r.body))
                           for r in df.select("commitlog_offset", "topic", "body").collect()))
    cuts = [int(ts[1400]), int(ts.max()) + 1]
    set_safe(broker, cuts[0])
    mirror.mirror_broker(broker, store, quiet=True)
    q = (spark.readStream.format("rocketmq").load(store).writeStream.foreachBatch(each)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        for t in cuts[1:]:
            set_safe(broker, t)
            assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
            q.processAllAvailable()
    finally:
        q.stop()

    def batch(path):
        return sorted((r.commitlog_offset, r.topic, bytes(r.body)) for r in
                      spark.read.format("rocketmq").load(path).select("commitlog_offset", "topic", "body").collect())
    assert seen == batch(store) == batch(golden_store) and len(seen) == 3000


def test_the_mirrors_own_expire_then_more_cycles(broker, tmp_path):
    """The mirror's retention is its own: expire removes its old segments (the broker still has
    them), and the next cycles go on from where the mirror ended; verify finds nothing wrong."""
    from storelib.ops.expire import expire
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1800]))
    mirror.mirror_broker(broker, store, quiet=True)
    e = expire(store, 1, now_ms=int(ts.max()) + 2 * 3600 * 1000, quiet=True)
    assert e["status"] == "committed" and e["commitlog_removed"] > 10
    set_safe(broker, int(ts.max()) + 1)
    s = mirror.mirror_broker(broker, store, quiet=True)
    assert s["status"] == "committed" and s["messages"] == 3000 - 1800
    assert not verify.verify_store(store, None, deep=True).problems
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["min_phy_offset"] > 0 and [b["batch_seq"] for b in snap.batches] == [1, 2, 3]


def test_the_next_cycle_finishes_an_expiry_cut_short_after_its_commit(broker, tmp_path, monkeypatch):
    """An expiry of the mirror that committed and deleted nothing (as a crash right after its
    commit leaves it): the next cycle, the next writer, deletes those files first, then goes on;
    the mirror verifies with no file left over."""
    from storelib.ops import expire as retention
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1800]))
    mirror.mirror_broker(broker, store, quiet=True)

    def cut(*a, **k):
        raise KeyboardInterrupt("cut after the commit")
    monkeypatch.setattr(retention.staged_deletes, "delete", cut)
    with pytest.raises(KeyboardInterrupt):
        retention.expire(store, 1, now_ms=int(ts.max()) + 2 * 3600 * 1000, quiet=True, housekeeping=False)
    monkeypatch.undo()
    removed = sorted(manifest.load_snapshot(storage.Store(store)).removed)
    assert len(removed) > 10 and all(os.path.exists(os.path.join(store, p)) for p in removed)
    set_safe(broker, int(ts.max()) + 1)
    s = mirror.mirror_broker(broker, store, quiet=True)
    assert s["status"] == "committed" and s["messages"] == 3000 - 1800
    assert not any(os.path.exists(os.path.join(store, p)) for p in removed)
    assert not os.path.exists(os.path.join(store, "_rocketlake", "staging"))
    assert not verify.verify_store(store, None, deep=True).problems


def test_records_longer_than_the_first_window(broker, monkeypatch):
    """A cycle reads a small window first, then larger ones: a record running past it (here every
    record, with a 100-byte first window) is read whole all the same."""
    monkeypatch.setattr(mirror, "FIRST_WINDOW", 100)
    monkeypatch.setattr(mirror, "WINDOW", 61000)       # the largest record: 60,206 bytes
    b = mirror.BrokerFiles(broker)
    phys, _, ts = _records(broker)
    pieces = mirror.safe_records(b, 0, int(ts.max()) + 1, 65536)
    got = np.concatenate([p.base + p.pos + p.starts for p in pieces])
    first_unsafe = int(np.flatnonzero(ts >= ts.max() + 1)[0]) if (ts >= ts.max() + 1).any() else len(ts)
    assert np.array_equal(got, phys[:first_unsafe])


def test_mirror_batches_are_recorded_as_mirror(broker, tmp_path, capsys, monkeypatch):
    """A mirror cycle's batch is recorded with operation ``mirror`` (not ``ingest``): in the
    checkpoints table, ``inspect checkpoints``/``history``, and the store browser's batch list.
    A mirror an earlier version wrote (its batches recorded as ``ingest``, the broker's identity in
    their detail) still reads and goes on."""
    import json as _json
    from storelib.cli import inspect as inspect_cli
    from storelib.ingest import commit as commit_mod
    from storelib.ui import history as ui_history
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    real = commit_mod.commit_batch
    set_safe(broker, int(ts[900]))
    with monkeypatch.context() as m:          # a store an earlier version mirrored: its batch says "ingest"
        m.setattr(mirror, "commit_batch",
                  lambda store, batch, *a, **k: real(store, dataclasses.replace(batch, operation="ingest"), *a, **k))
        assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    set_safe(broker, int(ts.max()) + 1)
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    assert [b["operation"] for b in snap.batches] == ["ingest", "mirror"]
    assert goldenlib.compare(golden_set(SET), store) == []
    capsys.readouterr()
    assert inspect_cli.main(["--store", store, "checkpoints", "--json"]) == 0
    rows = [_json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["operation"] for r in rows] == ["ingest", "mirror"]
    assert inspect_cli.main(["--store", store, "history", "--json"]) == 0
    hist = [_json.loads(x) for x in capsys.readouterr().out.splitlines()]
    second = snap.batches[-1]["batch_id"]
    assert {h["rocketlake_operation"] for h in hist if h["batch_id"] == second} == {"mirror"}
    assert [b["operation"] for b in ui_history.batches(st, snap)] == ["ingest", "mirror"]


def test_damage_inside_a_copied_range_stops_the_next_cycle(broker, tmp_path, capsys):
    """A byte of the broker's CommitLog changed in the middle of what the mirror copied long ago
    (not its first record, not the tail under the mirror's end): the next cycle's sweep finds it
    (exit 3, one line naming that offset) and the mirror is left as it was."""
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1200]))
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 0
    at = 10 * 65536 + 1000
    with open(os.path.join(broker, "commitlog", f"{10 * 65536:020d}"), "r+b") as fh:
        fh.seek(1000)
        b = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([b[0] ^ 0x20]))
    set_safe(broker, int(ts.max()) + 1)
    before = tree(store, skip=())
    capsys.readouterr()
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"offset {at} " in err[0] and "new mirror" in err[0], err
    assert tree(store, skip=()) == before


def test_the_sweep_rolls_over_the_copied_range(broker, tmp_path, monkeypatch):
    """With one checksum block (here one 64 KiB segment) a cycle, the sweep goes on where the last
    one ended, within one process (cycles that commit nothing) and across processes (from where
    the newest mirror batch recorded it): damage in the fourth segment is found by the fourth
    cycle after the first batch, not before."""
    monkeypatch.setattr(mirror, "SWEEP_BYTES", 1)
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[600]))
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    with open(os.path.join(broker, "commitlog", f"{3 * 65536:020d}"), "r+b") as fh:
        fh.seek(77)
        b = fh.read(1)
        fh.seek(77)
        fh.write(bytes([b[0] ^ 1]))
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "nothing-new"      # segment 0
    set_safe(broker, int(ts[700]))
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"        # segment 1
    import json as _json
    assert _json.loads(manifest.load_snapshot(storage.Store(store)).batches[-1]["detail"])["mirror"]["sweep"] == 131072
    mirror._sweep_at.clear()                                                               # another process
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "nothing-new"      # segment 2
    with pytest.raises(mirror.MirrorDiverged, match=f"offset {3 * 65536 + 77} "):
        mirror.mirror_broker(broker, store, quiet=True)                                    # segment 3


@pytest.mark.parametrize("spelling", ["plain", "store-through-a-link", "broker-through-a-link"])
def test_the_mirror_never_lives_inside_the_brokers_directory(tmp_path, spelling):
    """A store inside the broker's directory is refused (MirrorError) before anything is written,
    however the two paths are spelled: directly, the store through a symbolic link into the
    broker's directory, the broker's directory through a link."""
    from storelib.errors import MirrorError
    from support.opshelp import restore, small_config
    broker = restore("small-roll", "files.json", str(tmp_path / "broker"))
    inside = os.path.join(broker, "mirror")
    os.mkdir(inside)
    store, named = inside, broker
    if spelling == "store-through-a-link":
        store = str(tmp_path / "store-link")
        os.symlink(inside, store)
    elif spelling == "broker-through-a-link":
        named = str(tmp_path / "broker-link")
        os.symlink(broker, named)
    before = tree(broker, skip=())
    with pytest.raises(MirrorError, match="inside the broker's directory"):
        mirror.mirror_broker(named, store, small_config(), quiet=True)
    assert tree(broker, skip=()) == before and os.listdir(inside) == []


def _every(broker: str, store: str, seconds: str) -> subprocess.Popen:
    from conftest import ROOT
    return subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker, "--store", store,
                             "--every", seconds, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), start_new_session=True)


def _line(stream, p: subprocess.Popen, words: str) -> str:
    """The next line of ``stream`` holding ``words`` (AssertionError if ``p`` ends first)."""
    for line in stream:
        if words in line:
            return line
    raise AssertionError(f"{p.args[3:]} ended ({p.wait()}) before saying {words!r}: {p.stderr.read()[-2000:]}")


def test_a_second_mirror_of_a_store_is_refused(broker, tmp_path, capsys):
    """While ``mirror --every`` runs, another mirror of its store on this host (--once, --every)
    is refused before it does anything (exit 2, naming the running one's pid); once that one is
    gone, a mirror goes on from its batches."""
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1200]))
    p = _every(broker, store, "30")
    try:
        _line(p.stdout, p, '"status": "committed"')
        set_safe(broker, int(ts.max()) + 1)
        before = tree(store, skip=())
        capsys.readouterr()
        assert mirror_cli.main(["--from", broker, "--store", store, "--once", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "one mirror a store" in err and f"pid {p.pid}" in err, err
        assert tree(store, skip=()) == before
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)
    assert mirror_cli.main(["--from", broker, "--store", store, "--once", "--quiet"]) == 0
    assert len(manifest.load_snapshot(storage.Store(store)).batches) == 2


def test_every_skips_a_cycle_while_another_writer_has_the_store(broker, tmp_path):
    """``mirror --every``: a cycle that finds the writer lease held (an expire of the mirror's
    history, a repair) commits nothing, says so, and the run goes on: its next cycle commits."""
    from storelib.table import writerlease
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[1200]))
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 0
    set_safe(broker, int(ts.max()) + 1)
    other = writerlease.WriterLease(storage.Store(store), "expire-elsewhere")
    other.acquire()
    p = _every(broker, store, "0.5")
    try:
        line = _line(p.stderr, p, "cycle skipped")
        assert "expire-elsewhere" in line, line
        assert len(manifest.load_snapshot(storage.Store(store)).batches) == 1
        other.release()
        _line(p.stdout, p, '"status": "committed"')
    finally:
        other.release()
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)
    assert p.returncode in (0, 143), p.stderr.read()[-2000:]     # (0: the signal came in a cycle)
    assert manifest.load_snapshot(storage.Store(store)).batch["max_phy_offset"] == int(_records(broker)[1][-1])


def test_segments_the_broker_deletes_while_a_cycle_reads_are_no_divergence(broker, tmp_path, monkeypatch):
    """The broker's retention deleting its oldest segment right after a cycle listed the segments
    (before the identity check or the sweep reads it) is the broker's retention, not damage: the
    cycle commits, every record copied."""
    store = str(tmp_path / "mirror")
    _, ends, ts = _records(broker)
    set_safe(broker, int(ts[1200]))
    assert mirror_cli.main(["--from", broker, "--store", store, "--quiet"]) == 0
    set_safe(broker, int(ts.max()) + 1)
    listed = mirror.BrokerFiles.segments

    def then_delete(self):
        segs = listed(self)
        if len(segs) > 20:                       # (the oldest, long copied; the mirror's end is far later)
            os.remove(os.path.join(self.root, segs[0][1]))
        return segs
    monkeypatch.setattr(mirror.BrokerFiles, "segments", then_delete)
    out = mirror.mirror_broker(broker, store, quiet=True)
    assert out["status"] == "committed" and out["to"] == int(ends[-1]), out
    monkeypatch.undo()
    assert verify.verify_store(store, None, deep=True, threads=1).problems == []
