"""Store paths that are not what their name says, against every command: a FIFO or a device where
a store file is (``Store.path`` refuses it: a read would block for ever, a write would go to a
device), and a commit whose files the publish after it could not reach (a link out of the store,
a directory where the file goes: ``manifest.check_row_targets`` refuses it before anything is
committed, rather than leaving a committed batch no writer can publish). Also what lies outside a
store's own files: a FIFO or a device in the broker's directory a mirror reads (refused, never read),
a file a command writes that would land in the store (refused before any work), the checkpoints
log a preflight lists through a link out of the store (refused)."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from conftest import ROOT
from support.opshelp import restore, small_config

from storelib.errors import StorePathError
from storelib.io import localstore, storage
from storelib.ops import adopt

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")
SEGMENT = "commitlog/00000000000000000000"


def _state(root: str) -> dict:
    """Every entry under ``root``: a file's sha256, a link's target, a directory, anything else
    by its type (never opened: a FIFO would block)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                v = "link " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    v = hashlib.sha256(fh.read()).hexdigest()
            else:
                v = stat.S_IFMT(st.st_mode)
            out[os.path.relpath(p, root)] = v
    return out


def _cli(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """``rocketlake ARGS``; a run that blocks past ``timeout`` seconds (a read of a FIFO) fails the test."""
    try:
        return subprocess.run([sys.executable, "-m", "storelib.cli.main", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=ROOT))
    except subprocess.TimeoutExpired:
        pytest.fail(f"rocketlake {' '.join(args)} still running after {timeout} s (blocked on a FIFO?)")


@pytest.fixture(scope="module")
def adopted(tmp_path_factory):
    base = tmp_path_factory.mktemp("guards")
    broker = restore("small-roll", "files.json", str(base / "broker"))
    store = str(base / "store")
    assert adopt.adopt(None, store, broker, small_config(), quiet=True)["status"] == "committed"
    return store


@pytest.fixture
def store(adopted, tmp_path):
    s = str(tmp_path / "s")
    shutil.copytree(adopted, s, symlinks=True)
    return s


def _unblock_later(path: str) -> threading.Timer:
    """Open ``path`` (a FIFO) for writing in a few seconds and close it: a reader blocked on it
    then reads nothing instead of blocking the test for ever."""
    def writer() -> None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass                    # no reader: nothing blocked
    t = threading.Timer(5, writer)
    t.start()
    return t


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
def test_special_files_are_no_store_paths(tmp_path, kind):
    """A FIFO or a device at a store file's name: refused by both local stores' ``path`` (their
    reads), and by a listing that meets it."""
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    p = str(root / SEGMENT)
    if kind == "fifo":
        os.mkfifo(p)
    else:
        os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 3))   # /dev/null's device
    timer = _unblock_later(p) if kind == "fifo" else None
    try:
        for st in (storage.Store(str(root)), localstore.LocalStore(str(root))):
            with pytest.raises(StorePathError, match="FIFO" if kind == "fifo" else "character device"):
                st.read(SEGMENT, 0, 8)
        with pytest.raises(StorePathError, match=SEGMENT):
            storage.Store(str(root)).list_files("commitlog")
        with pytest.raises(StorePathError):
            storage.Store(str(root)).write_file(SEGMENT, [b"x" * 8])
    finally:
        if timer is not None:
            timer.cancel()


@pytest.mark.parametrize("where,args", [
    (SEGMENT, ["export", "--to", "{tmp}/exported"]),
    ("_rocketlake/checkpoints/_delta_log/00000000000000000000.json",
     ["expire", "--reserved-hours", "0", "--now", "99999999999999"]),
    ("_rocketlake/writer.lock", ["ingest", "--input", SAMPLE, "--local", "always", "--quiet"]),
    ("index/20000101000024000", ["query", "key", "--topic", "refund", "--key", "order-0"]),
], ids=["export-segment", "expire-delta-log", "ingest-lease", "query-index"])
def test_commands_refuse_a_fifo_in_the_store(store, tmp_path, where, args):
    """A FIFO where a store file or one of its tables' files is: the command ends with a line
    naming it, exit 1, and the store is as it was (no command blocks on it)."""
    p = os.path.join(store, where)
    if os.path.exists(p):
        os.remove(p)
    os.mkfifo(p)
    before = _state(store)
    cmd = args[:1] + ["--store", store] + [a.replace("{tmp}", str(tmp_path)) for a in args[1:]]
    r = _cli(*cmd)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "FIFO" in r.stderr and where in r.stderr, r.stderr[-2000:]
    assert _state(store) == before
    assert not os.path.exists(tmp_path / "exported")


def _batches(store: str) -> int:
    from storelib.table.snapshots import open_snapshot
    return len(open_snapshot(storage.Store(store), history=True).batches)


@pytest.mark.parametrize("case", ["queue-dir-links-out", "checkpoint-links-out", "checkpoint-is-a-directory"])
def test_an_ingest_whose_publish_could_not_reach_its_files_commits_nothing(store, tmp_path, case):
    """An ingest whose new files would go through a link out of the store, or onto a directory:
    refused before its commit (on the base it committed, then its publish failed, and so would
    every later writer's), the store and the link's target unchanged."""
    outside = tmp_path / "outside"
    outside.mkdir()
    src = str(tmp_path / "in.jsonl")
    with open(SAMPLE) as fh, open(src, "w") as out:
        lines = [next(fh) for _ in range(5)]
        if case == "queue-dir-links-out":           # a topic the store has no directory of yet
            lines = [re.sub(r'"topic": "[^"]*"', '"topic": "brandnew"', ln) for ln in lines]
        out.writelines(lines)
    if case == "queue-dir-links-out":
        os.symlink(str(outside), os.path.join(store, "consumequeue", "brandnew"))
    elif case == "checkpoint-links-out":
        shutil.move(os.path.join(store, "checkpoint"), outside / "checkpoint")
        os.symlink(str(outside / "checkpoint"), os.path.join(store, "checkpoint"))
    else:
        os.remove(os.path.join(store, "checkpoint"))
        os.mkdir(os.path.join(store, "checkpoint"))
    n, before, beyond = _batches(store), _state(store), _state(str(outside))
    r = _cli("ingest", "--store", store, "--input", src, "--local", "always", "--quiet")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "committed" not in r.stderr.replace("nothing was committed", ""), r.stderr[-2000:]
    assert ("a directory where" if case == "checkpoint-is-a-directory" else "outside the store root") in r.stderr
    assert _batches(store) == n, "the batch was committed"
    assert _state(str(outside)) == beyond
    after = _state(store)
    # a refused attempt may leave its staging (the next writer clears it), nothing else
    assert {k: v for k, v in after.items() if not k.startswith("_rocketlake/staging")} == before


def test_a_repair_that_could_not_put_a_file_in_place_commits_nothing(store):
    """``repair --apply`` of a store whose checkpoint is a directory: refused before its commit."""
    os.remove(os.path.join(store, "checkpoint"))
    os.mkdir(os.path.join(store, "checkpoint"))
    n, before = _batches(store), _state(store)
    r = _cli("repair", "--store", store, "--apply")
    assert r.returncode != 0 and "a directory where" in r.stderr, r.stderr[-2000:]
    assert _batches(store) == n, "the repair batch was committed"
    assert {k: v for k, v in _state(store).items() if not k.startswith("_rocketlake/staging")} == before


@pytest.mark.parametrize("to", ["consumequeue/zz", "linked/zz"])
def test_export_refuses_a_target_inside_the_store(store, tmp_path, to):
    """``export --to`` a directory inside the store (directly, or through a link to it): refused,
    exit 2, nothing written (on the base every exported file landed in the store, which then no
    longer verified and which a broker would have read as a topic)."""
    os.symlink(store, str(tmp_path / "linked"))
    target = os.path.join(store if to.startswith("consumequeue") else str(tmp_path), to)
    before = _state(store)
    r = _cli("export", "--store", store, "--to", target)
    assert r.returncode == 2 and "inside the store" in r.stderr, r.stderr[-2000:]
    assert _state(store) == before


@pytest.mark.parametrize("command", ["ingest", "mirror", "import"])
@pytest.mark.parametrize("inside", ["consumequeue/zz", "_rocketlake/staging/zz", "side", "linked/zz",
                                    "broker:consumequeue/zz"])
def test_a_new_store_inside_another_store_is_refused(store, tmp_path, command, inside):
    """A new store (an ingest's, a mirror's, an import's copy) whose directory lies inside another
    rocketlake store (directly, through a link to it) or under a broker directory's queues:
    refused, exit 2, nothing written. On the base its files became files of the other store: one
    under consumequeue/ a broker would load as a topic whose queue ids are not numbers, one under
    _rocketlake/ among the directories that store's writers clean up. (A parent directory the
    refused run made on its way may stay, empty, as after any refused first batch.)"""
    os.symlink(store, str(tmp_path / "linked"))
    broker = restore("small-roll", "files.json", str(tmp_path / "broker"))
    if inside.startswith("broker:"):
        outer, target = broker, os.path.join(broker, inside.split(":", 1)[1])
    else:
        outer = store
        target = os.path.join(str(tmp_path) if inside.startswith("linked") else store, inside)
    args = {"ingest": ("ingest", "--store", target, "--input", SAMPLE, "--quiet"),
            "mirror": ("mirror", "--from", store if outer == broker else broker, "--store", target, "--once",
                       "--quiet"),
            "import": ("ingest", "--store", target, "--from-store", broker, "--quiet")}[command]
    def files(root: str) -> dict:
        return {k: v for k, v in _state(root).items() if v != stat.S_IFDIR}
    before = files(outer)
    r = _cli(*args)
    # an import into the very broker directory it reads says that first (adopt's own check)
    said = "importing would copy the directory into itself" if (command, outer) == ("import", broker) else " lies inside "
    assert r.returncode == 2 and said in r.stderr, (r.returncode, r.stderr[-2000:])
    assert files(outer) == before


# ---------------------------------------------------------------- the broker's directory a mirror reads
@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """(broker, mirror): the small-roll broker mirrored up to its 1,500th record, its safe point
    then moved to its end (the next cycle reads on)."""
    from support.mirrorhelp import first_batch
    broker, mirror_store, _ = first_batch(tmp_path_factory.mktemp("mirrored"))
    return broker, mirror_store


def _mirror_end(store: str) -> int:
    from storelib.table.snapshots import open_snapshot
    return int(open_snapshot(storage.Store(store)).batch.max_phy_offset)


def _special(path: str, kind: str) -> None:
    """Put a FIFO, /dev/zero's device or a directory where the file ``path`` was."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    else:
        os.mkdir(path)


def _first_queue_file(broker: str) -> str:
    """The first file of the first queue of the first topic (the sizes a first cycle reads)."""
    rel = "consumequeue"
    for _ in range(3):
        rel += "/" + sorted(os.listdir(os.path.join(broker, rel)))[0]
    return rel


@pytest.mark.parametrize("cycle,where,kind", [
    ("next", "segment-past-the-mirror", "fifo"),
    ("next", "first-segment", "fifo"),
    ("next", "checkpoint", "fifo"),
    ("next", "checkpoint", "chardev"),
    ("next", "segment-past-the-mirror", "directory"),
    ("first", "consumequeue-file", "fifo"),
    ("first", "index-file", "fifo"),
    ("first", "checkpoint", "fifo"),
], ids=lambda v: v)
def test_the_mirror_refuses_a_broker_file_that_is_no_file(mirrored, tmp_path, cycle, where, kind):
    """A FIFO, a device or a directory where the broker's directory has a CommitLog segment, a
    consume-queue file, an index file or its checkpoint: the mirror ends at once with exit 2 and a
    line naming it (on the base a read of a FIFO blocked for ever, the device's zeros were read as
    the checkpoint), never reading it; the mirror (a next cycle) or its directory (a first one)
    and the broker's directory are as they were."""
    broker = str(tmp_path / "broker")
    shutil.copytree(mirrored[0], broker)
    if cycle == "next":
        store = str(tmp_path / "mirror")
        shutil.copytree(mirrored[1], store, symlinks=True)
    else:
        store = str(tmp_path / "new-mirror")
    F = 65536                                   # small-roll's CommitLog file size
    rel = {"segment-past-the-mirror": f"commitlog/{(_mirror_end(mirrored[1]) // F + 1) * F:020d}",
           "first-segment": SEGMENT, "checkpoint": "checkpoint",
           "consumequeue-file": _first_queue_file(broker),
           "index-file": "index/" + sorted(os.listdir(os.path.join(broker, "index")))[0]}[where]
    assert os.path.isfile(os.path.join(broker, rel))
    _special(os.path.join(broker, rel), kind)
    before, mine = _state(broker), _state(store) if cycle == "next" else None
    r = _cli("mirror", "--from", broker, "--store", store, "--once", "--quiet", timeout=45)
    assert r.returncode == 2, r.stderr[-2000:]
    what = {"fifo": "FIFO", "chardev": "character device", "directory": "directory"}[kind]
    assert what in r.stderr and os.path.join(broker, rel) in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert _state(broker) == before
    if cycle == "next":
        assert _state(store) == mine
    else:
        assert not os.path.exists(store)


# ---------------------------------------------------------------- files a command writes
_WRITERS = {
    "query-key": ["query", "--store", "{store}", "key", "--topic", "order_events", "--key",
                  "0A00002A0F0E0102030473036C2B0001", "--output", "{out}"],
    "query-range": ["query", "--store", "{store}", "range", "--begin", "0", "--end", "2100-01-01", "--local",
                    "always", "--output", "{out}.parquet"],
    "query-queries": ["query", "--store", "{store}", "--queries", "{queries}", "--output", "{out}"],
    "ingest": ["ingest", "--store", "{store}", "--input", SAMPLE, "--local", "always", "--quiet",
               "--json-summary", "{out}"],
    "import": ["ingest", "--store", "{store}", "--from-store", "{store}", "--local", "always", "--quiet",
               "--json-summary", "{out}"],
    "expire": ["expire", "--store", "{store}", "--reserved-hours", "0", "--now", "99999999999999", "--quiet",
               "--json-summary", "{out}"],
    "repair": ["repair", "--store", "{store}", "--apply", "--json-summary", "{out}"],
}


def _writer_args(name: str, store: str, out: str) -> list:
    from conftest import golden_set
    queries = os.path.join(golden_set("small-roll"), "queries.jsonl")
    return [a.format(store=store, out=out, queries=queries) for a in _WRITERS[name]]


@pytest.mark.parametrize("spelling", ["in-the-store", "through-a-link"])
@pytest.mark.parametrize("name", sorted(_WRITERS))
def test_a_file_a_command_writes_never_lands_in_the_store(store, tmp_path, name, spelling):
    """--output of a query (a lookup, a scan, the --queries job) and --json-summary of an ingest,
    an import, an expiry and a repair, naming a file inside the store (directly, or through a link
    to it): exit 2 with a line naming the option, before any work: no Spark, no lease, the store
    as it was (on the base the command ran, changed the store, and wrote its file among the
    store's own)."""
    if spelling == "in-the-store":
        out = os.path.join(store, "consumequeue", "out.json")
    else:
        os.symlink(store, str(tmp_path / "linked"))
        out = str(tmp_path / "linked" / "out.json")
    args = _writer_args(name, store, out)
    option = args[-2]
    before = _state(store)
    r = _cli(*args)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{option} {args[-1]} is inside the store {store}" in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert _state(store) == before


@pytest.mark.parametrize("name", ["query-key", "query-range", "ingest", "expire", "repair"])
def test_a_file_beside_the_store_is_written(store, tmp_path, name):
    """The same options naming a file in a directory beside the store (whose name starts with the
    store's): the command runs and writes it."""
    beside = str(tmp_path / (os.path.basename(store) + "-out"))
    os.mkdir(beside)
    args = _writer_args(name, store, os.path.join(beside, "out.json"))
    if name == "repair":
        args.remove("--apply")                  # (a dry run: nothing to repair, exit 0)
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.path.getsize(args[-1]) > 0


def test_the_output_check_is_of_local_paths_only(tmp_path):
    """Only a local output under a local store is refused: a remote store or a remote output is
    never inside a local directory; real paths decide (``..``, a name sharing the store's prefix)."""
    from storelib.cli.common import check_outputs
    from storelib.errors import BadInput
    s = str(tmp_path / "s")
    os.mkdir(s)
    check_outputs("s3://bucket/store", {"--output": s + "/x.json"})
    check_outputs("hdfs://nn/store", {"--output": s + "/x.json"})
    check_outputs(s, {"--output": "s3://bucket/x.json", "--json-summary": None})
    os.mkdir(s + "-out")                 # (an output in no directory is refused on its own)
    check_outputs(s, {"--output": s + "-out/x.json", "--json-summary": s + "/../x.json"})
    for inside in (s, s + "/x.json", str(tmp_path / "elsewhere" / ".." / "s" / "x.json"), "file://" + s + "/x"):
        with pytest.raises(BadInput, match="inside the store"):
            check_outputs(s, {"--output": inside})
    with pytest.raises(BadInput, match="--json-summary"):
        check_outputs("file://" + s, {"--output": None, "--json-summary": s + "/x.json"})


@pytest.mark.parametrize("output", ["s3://bucket/store/x.parquet", "s3://bucket/store/commitlog/x.parquet",
                                    "s3://bucket/store/", "hdfs://nn:8020/store/_rocketlake/x.json",
                                    "s3://bucket/elsewhere/../store/x.parquet"])
def test_a_remote_output_under_the_remote_stores_prefix_is_refused(output, monkeypatch):
    """An output under a remote store's own prefix (the bucket or name node and path decide, as
    spelled: one with '..' is refused for that) is refused before any work; on the base a Parquet
    range written to s3://bucket/store/commitlog/x.parquet landed among the store's files (its
    verify then FAILED). (No S3 server here: S3 is taken as answering, storelib.io.s3reach.)"""
    from storelib.cli.common import check_outputs
    from storelib.errors import BadInput
    from storelib.io import s3reach
    monkeypatch.setattr(s3reach, "require_reachable", lambda uri, settings: None)
    store = "hdfs://nn:8020/store" if output.startswith("hdfs") else "s3://bucket/store"
    with pytest.raises(BadInput, match="inside the store|component in the path"):
        check_outputs(store, {"--output": output})
    for beside in ("s3://bucket/store2/x.parquet", "s3://other/store/x.parquet"):
        check_outputs(store, {"--output": beside})
    # other name nodes: told apart by their addresses; names that do not resolve may be one
    check_outputs("hdfs://127.0.0.1:8020/store", {"--output": "hdfs://127.0.0.2:8020/store/x.json"})
    if output.startswith("hdfs"):
        with pytest.raises(BadInput, match="cannot tell whether"):
            check_outputs(store, {"--output": "hdfs://nn2:8020/store/x.json"})


# ---------------------------------------------------------------- what a preflight lists
@pytest.mark.parametrize("link", ["_rocketlake", "_rocketlake/checkpoints/_delta_log"])
def test_the_batch_seq_preflight_lists_no_log_outside_the_store(store, tmp_path, link):
    """``preflight.batch_seq`` (the version an interrupted ingest compares) through ``_rocketlake``
    or the checkpoints log linked out of the store: StorePathError, as every store path (on the
    base it listed the directory outside and answered with its newest version)."""
    from storelib.cli.preflight import batch_seq
    seq = batch_seq(store)
    assert seq >= 0
    outside = str(tmp_path / "outside")
    shutil.move(os.path.join(store, link), outside)
    log = os.path.join(outside, "checkpoints", "_delta_log") if link == "_rocketlake" else outside
    open(os.path.join(log, f"{seq + 7:020d}.json"), "w").close()
    os.symlink(outside, os.path.join(store, link))
    with pytest.raises(StorePathError, match="outside the store root"):
        batch_seq(store)
    assert batch_seq(str(tmp_path / "no-store")) == -1
