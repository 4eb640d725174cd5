"""Every writer of a local store holds the broker lock (``io.brokerlock``) under its writer lease:
ingest (a first batch and an append, in this process and through spark-submit), expire (store-wide
and per topic), the streaming sink's commit and the mirror's target are refused while another
process (a running broker) holds ``<store>/lock``, the store byte for byte as it was; while a
writer runs, a broker cannot take the lock; the ``lock`` a writer made stays (a broker that opened
it meanwhile locks that very file), empty, and is no damage. And the lock's holds within one
process: counted, one fd, thread-safe, nothing of them in a forked child."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, golden_set
from support.lockholder import broker_holding, lock_state, stat_tree
from support.opshelp import run, small_properties
from storelib import errors
from storelib.format import paths
from storelib.format.config import load_config
from storelib.io import brokerlock, storage
from storelib.table import writerlease

RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")
CUT = 1800                               # small-roll's messages: a.jsonl before, b.jsonl from here

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("bl-inputs")
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    (base / "a.jsonl").write_text("".join(lines[:CUT]))
    (base / "b.jsonl").write_text("".join(lines[CUT:]))
    small_properties(base)
    return base


def _ingest(inputs, store: str, part: str, batch: str) -> dict:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    return run_ingest(LocalSession(), store, str(inputs / f"{part}.jsonl"), "jsonl",
                      load_config(str(inputs / "small.properties")), batch_id=batch, quiet=True)


@pytest.fixture(scope="module")
def store_a(inputs, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bl-a") / "store")
    assert _ingest(inputs, out, "a", "A")["status"] == "committed"
    assert os.path.getsize(os.path.join(out, paths.LOCK_FILE)) == 0        # the one it held: it stays
    return out


def _newest(inputs) -> int:
    return max(json.loads(x)["store_timestamp"] for x in open(inputs / "a.jsonl"))


def _topics(inputs) -> set:
    return {json.loads(x)["topic"] for x in open(inputs / "a.jsonl")}


def _stage_sink_parts(inputs, store: str):
    """The streaming sink's task half of one micro-batch (its rows staged under ``_rocketlake/incoming``):
    the writer, its parts and the micro-batch's batch id and fingerprint."""
    from storelib.codec.messages import MESSAGE_SCHEMA
    from storelib.ingest.inputs import jsonl_to_table
    from storelib.ingest.sink import _Parts, stream_batch_id, stream_fingerprint
    table = jsonl_to_table(str(inputs / "b.jsonl")).select(MESSAGE_SCHEMA.names)
    writer = _Parts({"path": store, "config": str(inputs / "small.properties"), "leasewaitseconds": "1"},
                    owner="q-broker")
    parts = [writer._stage(iter(table.to_batches()))]
    bid = stream_batch_id("q-broker", 0)
    return writer, parts, bid, stream_fingerprint(bid, b'v1\n{}\n{"q-broker":0}\n')


def _write(what: str, inputs, store: str, broker_dir: str):
    """One writer of ``what`` on ``store`` in this process."""
    from storelib.ops.expire import expire
    if what in ("ingest-first", "append"):
        return _ingest(inputs, store, "b", "B")
    if what == "expire":
        return expire(store, 1, now_ms=_newest(inputs) + 2 * 3600_000, quiet=True)
    if what == "expire-topic":
        return expire(store, None, now_ms=_newest(inputs) + 2 * 3600_000, quiet=True,
                      topic_rules={t: 1 for t in _topics(inputs)})
    if what == "mirror":
        from storelib.ops.mirror import mirror_broker
        return mirror_broker(broker_dir, store, quiet=True)
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["ingest-first", "append", "expire", "expire-topic", "mirror"])
def test_a_writer_is_refused_while_a_broker_holds_the_stores_lock(inputs, store_a, tmp_path, what):
    """A broker running on the store (a store adopted in place, or one a broker was started on):
    the writer is refused (BrokerRunning) before it writes anything: every entry of the store,
    ``_rocketlake/`` included, byte for byte, mtime and inode as it was (no lease, no
    ``_rocketlake/`` where there was none). The mirror's target: the mirror's own store, never the
    broker's directory it reads. Once the broker is gone, the writer goes through."""
    store = str(tmp_path / "store")
    broker_dir = str(tmp_path / "broker")
    if what in ("ingest-first", "mirror"):
        os.makedirs(store)                  # a directory a broker was started on, nothing of a store yet
    else:
        shutil.copytree(store_a, store)
    if what == "mirror":
        from support import goldenlib
        goldenlib.restore(golden_set("small-roll"), broker_dir)
        os.remove(os.path.join(broker_dir, "abort.bak"))
    with broker_holding(os.path.join(store, paths.LOCK_FILE)):
        before = stat_tree(store)
        with pytest.raises(errors.BrokerRunning, match="running broker"):
            _write(what, inputs, store, broker_dir)
        assert stat_tree(store) == before
    out = _write(what, inputs, store, broker_dir)
    assert out["status"] == "committed", out


def test_the_streaming_sinks_commit_is_refused_while_a_broker_holds_the_lock(inputs, store_a, tmp_path):
    """The sink's commit waits ``leaseWaitSeconds`` and fails with BrokerRunning: nothing of the
    store changed but its own staged parts, which the sink always discards; the broker gone, the
    next micro-batch commits."""
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    writer, parts, bid, fp = _stage_sink_parts(inputs, store)
    staged = {p.rel for p in parts}
    with broker_holding(os.path.join(store, paths.LOCK_FILE)):
        before = {k: v for k, v in stat_tree(store).items() if k not in staged}
        t0 = time.time()
        with pytest.raises(errors.BrokerRunning, match="running broker"):
            writer._ingest(parts, bid, fp)
        assert time.time() - t0 < 30
        after = stat_tree(store)
    assert not staged & set(after)
    incoming = [k for k in before if k.startswith(paths.INCOMING_DIR)] + [paths.META_DIR]
    assert {k: v for k, v in after.items() if k not in incoming} == {k: v for k, v in before.items()
                                                                     if k not in incoming}
    writer, parts, bid, fp = _stage_sink_parts(inputs, store)
    assert writer._ingest(parts, bid, fp)["status"] == "committed"
    assert lock_state(os.path.join(store, paths.LOCK_FILE)) == "free"


def test_the_mirror_reads_a_running_brokers_directory(inputs, tmp_path):
    """The broker lock the mirror holds is its target's: a broker running on the directory it
    mirrors (the whole point of a mirror) stops nothing, and its lock is never touched."""
    from support import goldenlib
    from storelib.ops.mirror import mirror_broker
    broker_dir = str(tmp_path / "broker")
    goldenlib.restore(golden_set("small-roll"), broker_dir)
    os.remove(os.path.join(broker_dir, "abort.bak"))
    lock = os.path.join(broker_dir, paths.LOCK_FILE)
    with broker_holding(os.path.join(broker_dir, paths.LOCK_FILE)):
        assert mirror_broker(broker_dir, str(tmp_path / "mirror"), quiet=True)["status"] == "committed"
        assert lock_state(lock) == "held"
    assert open(lock, "rb").read() == b"lock"
    assert os.path.getsize(str(tmp_path / "mirror" / paths.LOCK_FILE)) == 0      # the target's own


# A broker starting: DefaultMessageStore's constructor opens ``lock`` (RandomAccessFile "rw": made
# when there is none), its load() (the recovery) runs, and only start() takes FileChannel.tryLock(0,
# 1, false) and writes "lock" into the file. Told on stdin, it locks the file it opened.
# Another rocketlake writer: the lock held shared until its stdin closes.
_SHARER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
print("free", flush=True)
sys.stdin.read()
"""

_STARTING_BROKER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
print("opened", flush=True)
sys.stdin.readline()
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
except OSError:
    print("refused", flush=True)
else:
    os.pwrite(fd, b"lock", 0)
    print("started", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("made_by", ["writer", "broker"])
def test_a_broker_that_opened_lock_before_a_writer_ended_still_excludes_the_next_writer(inputs, store_a, tmp_path,
                                                                                         made_by):
    """A broker opens ``lock`` (made by a writer running then, or by the broker itself, empty) and
    takes its lock only after its load(): a writer that ends in between must leave that very file
    where it is. Removed, the broker would lock a file no longer in the directory and run, and the
    next writer would make a new ``lock``, lock it, and append under the running broker. Here that
    next writer is refused (BrokerRunning), the store as it was."""
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    lock = os.path.join(store, paths.LOCK_FILE)
    if os.path.lexists(lock):
        os.remove(lock)
    lease = writerlease.WriterLease(storage.Store(store), "W")
    if made_by == "writer":
        lease.acquire()
        assert os.path.isfile(lock)
    broker = subprocess.Popen([sys.executable, "-c", _STARTING_BROKER, lock], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout.readline().strip() == "opened"
        if made_by == "broker":
            lease.acquire()              # the broker's file, empty: it has not started yet
        lease.release()                  # the writer ends while the broker loads
        broker.stdin.write("\n")
        broker.stdin.flush()
        assert broker.stdout.readline().strip() == "started"
        before = stat_tree(store)
        with pytest.raises(errors.BrokerRunning, match="running broker"):
            _write("append", inputs, store, "")
        assert stat_tree(store) == before
        assert open(lock, "rb").read() == b"lock"
    finally:
        broker.kill()
        broker.wait()


@pytest.mark.parametrize("order", ["shared-first", "exclusive-first"])
def test_a_forked_childs_end_of_an_inherited_hold_leaves_the_parents_lock(tmp_path, order):
    """A child forked while this process holds the lock (exclusive, and shared: a repair and its
    lease) and ending the holds it inherited: the lock is the parent's, not the child's. The
    child neither blocks (converting a lock it does not hold to shared would wait for the
    parent's for ever) nor touches the file; the parent's lock stays in force on that file."""
    import warnings
    st = _store(tmp_path)
    lock = os.path.join(st.root, paths.LOCK_FILE)
    ex, sh = _hold(st, "exclusive"), _hold(st, "shared")
    ino = os.stat(lock).st_ino
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)       # (fork in a process with threads)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for h in ((sh, ex) if order == "shared-first" else (ex, sh)):
                h.release()
            code = 0
        finally:
            os._exit(code)
    deadline = time.time() + 10
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the child blocked ending the holds it inherited")
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert os.stat(lock).st_ino == ino
        assert lock_state(lock, "shared") == "held"
    finally:
        sh.release()
        ex.release()
    assert lock_state(lock, "exclusive") == "free"


def test_ingest_through_spark_submit_exits_3_while_a_broker_holds_the_lock(inputs, store_a, tmp_path):
    """``jobs/ingest.py`` under spark-submit, appending to a store a broker runs on: exit 3 naming
    the running broker, the store as it was."""
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    with broker_holding(os.path.join(store, paths.LOCK_FILE)):
        before = stat_tree(store)
        res = run("ingest.py", "--store", store, "--input", str(inputs / "b.jsonl"), "--format", "jsonl",
                  "--batch-id", "B", "--quiet", submit=True)
        # (spark-submit's PythonRunner passes the job's stderr on as its stdout)
        assert res.returncode == 3 and "running broker" in res.stdout + res.stderr, res.stderr[-3000:]
        assert stat_tree(store) == before


def test_expire_job_exits_3_while_a_broker_holds_the_lock(inputs, store_a, tmp_path):
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    with broker_holding(os.path.join(store, paths.LOCK_FILE)):
        before = stat_tree(store)
        res = run("expire.py", "--store", store, "--reserved-hours", "1", "--now",
                  str(_newest(inputs) + 2 * 3600_000), "--quiet")
        assert res.returncode == 3 and "running broker" in res.stderr, res.stderr[-3000:]
        assert stat_tree(store) == before


def _runner(args: list, env: dict | None = None, popen: bool = False):
    cmd = [sys.executable, RUNNER, *map(str, args)]
    e = dict(os.environ, **(env or {}))
    if popen:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("what", ["ingest", "expire", "sink"])
def test_a_broker_cannot_take_the_lock_while_a_writer_runs(inputs, store_a, tmp_path, what):
    """A writer held right before its Delta commit (its files staged): ``lock`` is there, and a
    broker starting then cannot take it (its tryLock fails: it does not start); another
    rocketlake writer can share it (the writer lease orders those). The writer goes on, commits,
    and leaves ``lock`` where it was, free."""
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    lock = os.path.join(store, paths.LOCK_FILE)
    gate = str(tmp_path / "gate")
    args = {"ingest": ["ingest", store, inputs / "b.jsonl", inputs / "small.properties", "B"],
            "expire": ["expire", store, 1, _newest(inputs) + 2 * 3600_000],
            "sink": ["sink", store, inputs / "b.jsonl", inputs / "small.properties", "q1", 0]}[what]
    proc = _runner(args, {"ROCKETLAKE_HOLD": f"before-delta-commit:{gate}"}, popen=True)
    try:
        deadline = time.time() + 300
        while not os.path.exists(gate + ".reached") and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(gate + ".reached"), proc.communicate()[1][-3000:]
        assert os.path.getsize(lock) == 0
        assert lock_state(lock, "exclusive") == "held" and lock_state(lock, "shared") == "free"
    finally:
        open(gate, "w").close()
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["status"] == "committed"
    assert os.path.getsize(lock) == 0 and lock_state(lock) == "free"


def test_a_killed_writers_lock_is_no_damage(inputs, store_a, tmp_path):
    """An ingest killed after its lease leaves ``lock`` as it was, empty: verify finds nothing,
    inspect reads the store, the store is still a store to write; the rerun commits."""
    from storelib.ops import inspect as inspection
    from storelib.table.snapshots import open_snapshot
    from storelib.table.storeinfo import StoreKind, check_store
    from storelib.verify import driver as verify
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    lock = os.path.join(store, paths.LOCK_FILE)
    killed = _runner(["ingest", store, inputs / "b.jsonl", inputs / "small.properties", "B"],
                     {"ROCKETLAKE_FAULT": "after-files-staged"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert os.path.isfile(lock) and os.path.getsize(lock) == 0
    assert verify.verify_store(store, load_config(str(inputs / "small.properties"))).problems == []
    st = storage.Store(store)
    assert inspection.stats(st, open_snapshot(st))
    assert check_store(store, writing=True) == StoreKind.ROCKETLAKE
    assert _ingest(inputs, store, "b", "B")["status"] == "committed"
    assert os.path.getsize(lock) == 0 and lock_state(lock) == "free"


def test_a_directory_a_killed_first_ingest_left_only_its_lock_in_is_empty(tmp_path):
    """Killed after it made the store's ``lock`` and before its lease: the directory holds that
    empty file only, and is still an empty directory to write a store into."""
    from storelib.table.storeinfo import StoreKind, check_store
    d = tmp_path / "new"
    d.mkdir()
    (d / paths.LOCK_FILE).write_bytes(b"")
    assert check_store(str(d), writing=True) == StoreKind.EMPTY
    (d / "other").write_bytes(b"x")
    with pytest.raises(errors.StoreNotFound):
        check_store(str(d), writing=True)


# -- holds within one process

def _store(tmp_path) -> storage.Store:
    d = tmp_path / "s"
    d.mkdir(exist_ok=True)
    return storage.Store(str(d))


def _hold(st: storage.Store, mode: str):
    return brokerlock.hold_broker_lock(st, create=True, **({"shared": True} if mode == "shared" else {}))


@pytest.mark.parametrize("outer,inner", [("exclusive", "shared"), ("shared", "shared"), ("exclusive", "exclusive")])
def test_a_nested_hold_released_first_leaves_the_outer_one_in_force(tmp_path, outer, inner):
    """A repair or an in-place adopt (exclusive), then its writer lease (shared), in one process:
    POSIX drops a process's locks on a file when any fd of it closes, so the inner hold's end
    must not end the outer one: another process still cannot take the lock, in the outer's mode."""
    st = _store(tmp_path)
    lock = os.path.join(st.root, paths.LOCK_FILE)
    a, b = _hold(st, outer), _hold(st, inner)
    assert a is not None and b is not None
    b.release()
    assert lock_state(lock, "exclusive") == "held"
    b.release()                            # a second release of one hold does nothing
    assert lock_state(lock, "shared") == ("free" if outer == "shared" else "held")
    a.release()
    assert lock_state(lock) == "free" and os.path.getsize(lock) == 0        # made by this process: it stays


def test_an_exclusive_hold_inside_a_shared_one_and_its_end(tmp_path):
    """A writer's lease (shared), then an exclusive hold in the same process: the lock becomes
    exclusive while both are held, shared again when the exclusive one ends; refused (and the
    shared hold kept) when another process shares the lock."""
    st = _store(tmp_path)
    lock = os.path.join(st.root, paths.LOCK_FILE)
    a = brokerlock.hold_broker_lock(st, create=True, shared=True)
    b = brokerlock.hold_broker_lock(st, create=True)
    assert lock_state(lock, "shared") == "held"
    b.release()
    assert lock_state(lock, "shared") == "free" and lock_state(lock, "exclusive") == "held"
    sharer = subprocess.Popen([sys.executable, "-c", _SHARER, lock], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert sharer.stdout.readline().strip() == "free"
        with pytest.raises(errors.BrokerRunning):
            brokerlock.hold_broker_lock(st, create=True)
        assert lock_state(lock, "exclusive") == "held"
    finally:
        sharer.communicate("")
    a.release()
    assert lock_state(lock) == "free"


def test_holds_from_many_threads_share_one_lock(tmp_path):
    """Threads taking and ending holds at once (a sink's commit beside a repair in one process):
    while one hold lives the lock stays held; the last one lets it go, and no fd
    is left open."""
    st = _store(tmp_path)
    lock = os.path.join(st.root, paths.LOCK_FILE)
    keep = brokerlock.hold_broker_lock(st, create=True, shared=True)
    errs: list = []

    def churn(k: int) -> None:
        try:
            for i in range(200):
                h = brokerlock.hold_broker_lock(st, create=True, shared=(i + k) % 3 != 0)
                assert h is not None
                h.release()
        except BaseException as e:  # noqa: BLE001 - reported below
            errs.append(e)
    threads = [threading.Thread(target=churn, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errs == []
    assert lock_state(lock, "exclusive") == "held"
    keep.release()
    assert lock_state(lock) == "free"
    assert not [n for n in os.listdir("/proc/self/fd") if _names(n, lock)]


def _names(fd: str, path: str) -> bool:
    """Is this process's fd ``fd`` open on ``path`` (removed or not)?"""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(path)
    except OSError:
        return False


def test_a_writer_lease_refused_by_the_broker_lock_writes_nothing(tmp_path):
    """``WriterLease.acquire`` on a store a broker holds: BrokerRunning, no lease file, no
    ``_rocketlake/``; on a new directory it makes the directory first and holds its lock, and its
    release leaves that ``lock`` alone in it."""
    st = _store(tmp_path)
    with broker_holding(os.path.join(st.root, paths.LOCK_FILE)):
        before = stat_tree(st.root)
        lease = writerlease.WriterLease(st, "x")
        with pytest.raises(errors.BrokerRunning):
            lease.acquire()
        assert stat_tree(st.root) == before
        lease.release()
    new = storage.Store(str(tmp_path / "new" / "store"))
    lease = writerlease.WriterLease(new, "y")
    lease.acquire()
    try:
        assert lock_state(os.path.join(new.root, paths.LOCK_FILE)) == "held"
    finally:
        lease.release()
    assert os.listdir(new.root) == [paths.LOCK_FILE]
