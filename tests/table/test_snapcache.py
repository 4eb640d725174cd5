"""The shell lookup path (no Spark, no Delta, no pyarrow): the snapshot cache under
``_rocketlake/`` (storelib/table/snapcache.py), the pyarrow-free local store (storelib/io/localstore.py) and
the plain-Python text forms (storelib/format/textforms.py).

A store is adopted from the golden small-roll set without Spark; its cache must give exactly the
snapshot the Delta tables give, and a missing, stale, damaged or lying cache must fall back to
the Delta tables (or be refused), never change an answer.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROOT
from support.opshelp import small_config
from storelib import errors
from storelib.ops import adopt
from storelib.codec import hosts, messages as codec, properties
from storelib.table import manifest, snapcache, storefiles
from storelib.format import names, paths, records, textforms
from storelib.read import query, rangescan
from storelib.io import storage
from storelib.io.localstore import is_plain_path, LocalStore
from storelib.runtime.faults import CACHE_POINTS


@pytest.fixture(scope="module")
def store(restored_golden, tmp_path_factory):
    src = restored_golden("small-roll")
    p = str(tmp_path_factory.mktemp("snap") / "store")
    shutil.copytree(src, p)
    adopt.adopt(None, p, p, small_config(), quiet=True)
    return p


@pytest.fixture
def scratch(store, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(store, dst)
    return dst


def _files(path, cached: bool):
    """(StoreFiles, batch id) as the readers get them, from the cache or from the Delta tables."""
    if not cached:
        os.remove(os.path.join(path, paths.SNAPSHOT_CACHE))
    files, info = storefiles.open_files(path)
    return files, info.batch_id


def test_adopt_writes_a_cache_equal_to_the_delta_snapshot(store, scratch):
    assert os.path.exists(os.path.join(store, paths.SNAPSHOT_CACHE))
    cached = snapcache.load(LocalStore(store))
    snap = manifest.load_snapshot(storage.Store(store))
    assert cached is not None and cached.batch == snap.batch and cached.files == snap.files
    assert _files(store, True) == _files(scratch, False)


def test_the_shell_path_loads_no_pyarrow_numba_deltalake_or_spark(store):
    code = ("import json, sys\nfrom storelib.read.query import open_store\n"
            f"r = open_store({store!r})\nm = r.look_message_by_offset(r.get_min_phy_offset())\n"
            "p = r.find_by_key(m['topic'], m['properties_string'].split('\\x01')[1].split('\\x02')[0])\n"
            "heavy = sorted({n.split('.')[0] for n in sys.modules} & {'pyarrow', 'numba', 'deltalake', 'pyspark'})\n"
            "print(json.dumps([r.snapshot.source, heavy]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == ["manifest", []]


def test_cli_key_lookup_without_pyarrow_prints_what_it_printed_with_it(store):
    r = query.open_store(store)
    m = r.look_message_by_offset(r.get_min_phy_offset() + 0)
    uniq, keys = records.message_keys(m)
    args = [sys.executable, os.path.join(ROOT, "jobs", "query.py"), "--store", store, "key", "--topic", m["topic"],
            "--key", uniq]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from storelib.cli.query import _message_rows, Output
    lines = []

    class Sink:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass
    o = Output(None, "base64")
    real, sys.stdout = sys.stdout, Sink()
    try:
        o.write_table(_message_rows(r.find_by_key(m["topic"], uniq).messages))    # the Arrow route
    finally:
        sys.stdout = real
    assert out.stdout == "".join(lines) and out.stdout.count("\n") >= 1


@pytest.mark.parametrize("damage", ["flip_body", "truncate", "garbage", "empty", "header_only"])
def test_damaged_cache_falls_back_to_the_delta_tables(store, scratch, damage):
    p = os.path.join(scratch, paths.SNAPSHOT_CACHE)
    raw = open(p, "rb").read()
    head, _, body = raw.partition(b"\n")
    bad = {"flip_body": head + b"\n" + body[:50] + bytes([body[50] ^ 1]) + body[51:],
           "truncate": raw[:len(raw) // 2], "garbage": os.urandom(len(raw)), "empty": b"",
           "header_only": head + b"\n"}[damage]
    open(p, "wb").write(bad)
    assert snapcache.load(LocalStore(scratch)) is None
    assert _files(scratch, True) == _files(store, True)


def _rewrite(path, change):
    """Re-encode the cache with ``change`` applied to its body (a self-consistent cache that lies)."""
    p = os.path.join(path, paths.SNAPSHOT_CACHE)
    doc = snapcache.decode(open(p, "rb").read())
    change(doc)
    open(p, "wb").write(snapcache.encode(doc["tables"], doc["batch"], doc["files"]))


def test_stale_or_foreign_cache_is_not_used(store, scratch, tmp_path):
    # a commit file changed since the cache was written (another store at the same path, a rewrite)
    _rewrite(scratch, lambda d: d["tables"]["manifest"]["files"][-1].__setitem__(1, "0" * 64))
    assert snapcache.load(LocalStore(scratch)) is None
    # a newer Delta version exists
    shutil.copy(os.path.join(store, paths.SNAPSHOT_CACHE), os.path.join(scratch, paths.SNAPSHOT_CACHE))
    log = os.path.join(scratch, paths.CHECKPOINTS_DIR, "_delta_log")
    newest = max(n for n in os.listdir(log) if n.endswith(".json"))
    nxt = os.path.join(log, f"{int(newest[:20]) + 1:020d}.json")
    open(nxt, "w").close()
    try:
        assert snapcache.load(LocalStore(scratch)) is None
    finally:
        os.remove(nxt)
    assert snapcache.load(LocalStore(scratch)) is not None


@pytest.mark.parametrize("path", ["../outside/commitlog/00000000000000000000", "/etc/passwd", "commitlog/../x",
                                  "commitlog//00000000000000000000", "commitlog/\x00"])
def test_cache_naming_a_path_outside_is_refused(store, scratch, path):
    def change(d):
        d["files"][0]["path"] = path
    _rewrite(scratch, change)
    assert snapcache.load(LocalStore(scratch)) is None        # the Delta tables decide (and they are sound)
    assert _files(scratch, True) == _files(store, True)


def test_refresh_never_raises_and_expire_keeps_the_cache_current(store, scratch):
    from storelib.ops import expire as retention
    assert snapcache.refresh(storage.Store(str(scratch) + "/nothing-here")) is False
    snap = manifest.load_snapshot(storage.Store(scratch))
    keep = sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"])[10]
    s = retention.expire(scratch, 1.0, now_ms=keep["max_store_ts"] + 3600 * 1000 + 1, quiet=True)
    assert s["status"] == "committed"
    cached = snapcache.load(LocalStore(scratch))
    assert cached is not None and cached.batch["operation"] == "expire"
    assert cached.files == manifest.load_snapshot(storage.Store(scratch)).files


def test_local_store_refuses_what_store_refuses(tmp_path):
    root = tmp_path / "s"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / "a").write_bytes(b"0123456789")
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", root / "commitlog" / "link")
    ls, st = LocalStore(str(root)), storage.Store(str(root))
    for rel in ["commitlog/link", "../outside", "/etc/passwd", "a/../../x", "commitlog\\a", "x\x00"]:
        with pytest.raises(errors.StorePathError):
            ls.path(rel)
        with pytest.raises(errors.StorePathError):
            ls.read(rel)
    assert ls.read("commitlog/a", 2, 3) == st.read("commitlog/a", 2, 3) == b"234"
    assert ls.read("commitlog/a", 8) == st.read("commitlog/a", 8) == b"89"
    assert ls.size("commitlog/a") == st.size("commitlog/a") == 10 and ls.size("commitlog/b") is None
    assert ls.exists("commitlog/a") and not ls.exists("commitlog/b")
    assert ls.list_dirs("") == st.list_dirs("") == ["commitlog"]
    with pytest.raises(errors.StorePathError):
        ls.list_files("commitlog")               # served by storage.Store: its symlink check
    for rel in ["a", "commitlog/00000000000000000000", "x/.y", "..a", "_rocketlake/staging/b-1/a/files/x"]:
        assert is_plain_path(rel) and names.rel_path_problem(rel) is None
    for rel in ["", ".", "..", "a/..", "a//b", "/a", "a/", "C:x", "a b", "é"]:
        assert not is_plain_path(rel)


def test_light_copies_agree_with_their_vectorized_owners():
    # the host text the readers print is what the encoder parses back to the same bytes
    for raw in (bytes([10, 0, 0, 7]) + (50123).to_bytes(4, "big"), bytes(15) + b"\x01" + (5000).to_bytes(4, "big"),
                bytes(range(16)) + (65535).to_bytes(4, "big")):
        assert hosts.parse_host(textforms.format_host(raw))[0] == raw
    # the plain-Python properties parser agrees with the compiled one the Spark reads use
    cases = ["", "a\x01b\x02", "TAGS\x01x\x02KEYS\x01k1 k2\x02TAGS\x01y", "\x01\x02a\x01\x02b\x01c", "ab\x01",
             "é\x01ü\x02x\x01\x01y\x02"]
    mapped, _ = properties.parse_properties(pa.array(cases, pa.string()))
    for s, m in zip(cases, mapped.to_pylist()):
        assert textforms.parse_properties_string(s) == dict(m), s
    # the message table a Spark read builds has the columns, in order, the single lookups print
    assert tuple(rangescan.message_table(codec.decode_records(np.zeros(0, np.uint8), 0, np.zeros(0, np.int64))).column_names) \
        == records.MESSAGE_COLUMNS


# ----------------------------------------------------------------------------- base + delta
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=90),
                     lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=6),
                     max_leaves=30)


@settings(max_examples=100, deadline=None)
@given(_json, _json, st.text(max_size=200), st.text(max_size=40), st.text(max_size=40))
def test_a_change_turns_the_old_value_into_the_new_one(a, b, common, x, y):
    for old, new in ((a, b), (common + x, common + y), (x + common, y + common), ([a, b, common], [a, common])):
        change = json.loads(json.dumps(snapcache._diff(old, new) or ["=", old]))
        assert json.dumps(snapcache._patch(old, change), sort_keys=True) == json.dumps(new, sort_keys=True)


def _cache_files(path) -> dict:
    d = os.path.join(path, paths.META_DIR)
    return {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)) if f.startswith("snapshot-cache")}


def _expire_some(path, k):
    """A committed expiry of the store's oldest ``k`` segments (and what only they held)."""
    from storelib.ops import expire as retention
    snap = manifest.load_snapshot(storage.Store(path))
    keep = sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"])[k]
    assert retention.expire(path, 1.0, now_ms=keep["max_store_ts"] + 3600 * 1000 + 1, quiet=True)["status"] \
        == "committed"


def _cache_is_the_delta_snapshot(path):
    cached = snapcache.load(LocalStore(path))
    snap = manifest.load_snapshot(storage.Store(path))
    assert cached is not None and cached.batch == snap.batch and cached.files == snap.files


def _document_is_what_a_fresh_refresh_writes(path):
    """The document of base + delta is, byte for byte, the base a refresh writes from scratch."""
    doc = snapcache.document(LocalStore(path))
    for rel in (paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA):
        if os.path.exists(os.path.join(path, rel)):
            os.remove(os.path.join(path, rel))
    assert snapcache.refresh(storage.Store(path)) and list(_cache_files(path)) == ["snapshot-cache.json"]
    assert snapcache.document(LocalStore(path)) == doc


def test_a_commit_writes_a_delta_of_the_base_until_a_new_base_pays(scratch, monkeypatch):
    base = _cache_files(scratch)
    assert list(base) == ["snapshot-cache.json"]                  # adopt: the first cache is a base
    paid = len(base["snapshot-cache.json"])
    for n, k in enumerate((3, 6), 1):
        _expire_some(scratch, k)
        got = _cache_files(scratch)
        assert got["snapshot-cache.json"] == base["snapshot-cache.json"]    # the base is not uploaded again
        delta = got["snapshot-cache.delta.json"]
        head = json.loads(delta.partition(b"\n")[0])
        assert (head["n"], head["paid"]) == (n, paid - len(base["snapshot-cache.json"]))
        assert len(delta) <= paid / n          # no more than the cache's writes since the base, on average
        paid += len(delta)
        _cache_is_the_delta_snapshot(scratch)
        assert _files(scratch, True)[1] == manifest.load_snapshot(storage.Store(scratch)).batch["batch_id"]
    _document_is_what_a_fresh_refresh_writes(scratch)
    monkeypatch.setattr(snapcache, "REBASE_SHARE", 0.0)               # the delta cost too much: a new base
    _expire_some(scratch, 9)
    assert list(_cache_files(scratch)) == ["snapshot-cache.json"]
    _cache_is_the_delta_snapshot(scratch)


@pytest.mark.parametrize("damage", ["flip_body", "truncate", "another_base", "lying_result", "garbage"])
def test_a_damaged_or_foreign_delta_is_never_applied(scratch, damage):
    _expire_some(scratch, 3)
    older = _cache_files(scratch)["snapshot-cache.delta.json"]
    _expire_some(scratch, 6)
    p = os.path.join(scratch, paths.SNAPSHOT_CACHE_DELTA)
    raw = open(p, "rb").read()
    head, _, body = raw.partition(b"\n")
    h = json.loads(head)
    if damage == "another_base":
        h["base"] = "0" * 64
    if damage == "lying_result":                              # the change of the older delta, under this header
        body = older.partition(b"\n")[2]
        h.update(length=len(body), sha256=hashlib.sha256(body).hexdigest())
    bad = {"flip_body": head + b"\n" + body[:20] + bytes([body[20] ^ 1]) + body[21:], "truncate": raw[:len(raw) // 2],
           "garbage": os.urandom(len(raw))}.get(damage, json.dumps(h).encode() + b"\n" + body)
    open(p, "wb").write(bad)
    assert snapcache.load(LocalStore(scratch)) is None        # the base alone is stale: the Delta tables decide
    assert _files(scratch, True) == _files(scratch, False)


@pytest.mark.slow
@pytest.mark.parametrize("point", CACHE_POINTS)
def test_a_writer_killed_while_writing_the_cache_leaves_a_correct_snapshot(scratch, point):
    _expire_some(scratch, 3)                                  # a base and a delta, as after a few batches
    before = _cache_files(scratch)
    snap = manifest.load_snapshot(storage.Store(scratch))
    keep = sorted(snap.of_kind("commitlog"), key=lambda r: r["base_offset"])[6]
    env = dict(os.environ, PYTHONPATH=ROOT, ROCKETLAKE_FAULT=point, ROCKETLAKE_TEST_CACHE_REBASE_SHARE="0")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "expire", scratch,
                        "1", str(keep["max_store_ts"] + 3600 * 1000 + 1)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    after = _cache_files(scratch)
    snap = manifest.load_snapshot(storage.Store(scratch))
    assert snap.batch["operation"] == "expire" and snap.batch["batch_seq"] == 3    # the expiry committed
    if point == "cache-before-write":
        assert after == before and snapcache.load(LocalStore(scratch)) is None      # stale: not used
    else:                                                     # a new base beside the old base's delta
        assert after["snapshot-cache.delta.json"] == before["snapshot-cache.delta.json"]
        assert after["snapshot-cache.json"] != before["snapshot-cache.json"]
        _cache_is_the_delta_snapshot(scratch)
    assert _files(scratch, True) == _files(scratch, False)
    _expire_some(scratch, 9)                                  # the next commit's cache is whole and current
    _cache_is_the_delta_snapshot(scratch)
    _document_is_what_a_fresh_refresh_writes(scratch)


def test_a_cache_of_the_previous_format_is_refused_and_replaced(store, scratch):
    """A store written before the base + delta format holds a version-1 cache (its document
    uncompressed, no delta): readers refuse it and read the Delta tables, and the next refresh
    writes a base of this format that they use."""
    p = os.path.join(scratch, paths.SNAPSHOT_CACHE)
    body = snapcache.document(storage.Store(scratch))
    assert body is not None
    header = json.dumps({"format": snapcache.FORMAT, "version": 1, "length": len(body),
                         "sha256": hashlib.sha256(body).hexdigest()}, sort_keys=True)
    open(p, "wb").write(header.encode() + b"\n" + body)
    if os.path.exists(os.path.join(scratch, paths.SNAPSHOT_CACHE_DELTA)):
        os.remove(os.path.join(scratch, paths.SNAPSHOT_CACHE_DELTA))
    assert snapcache.load(LocalStore(scratch)) is None
    assert _files(scratch, True) == _files(store, True)
    assert snapcache.refresh(storage.Store(scratch))
    assert json.loads(open(p, "rb").read().partition(b"\n")[0])["version"] == snapcache.VERSION
    cached = snapcache.load(LocalStore(scratch))
    assert cached is not None and cached.files == snapcache.load(LocalStore(store)).files



def _reads(store) -> list:
    """The files ``store`` reads from now on (by path)."""
    reads: list = []
    real = store.read

    def one(rel, *a, **kw):
        reads.append(rel.rsplit("/", 1)[-1])
        return real(rel, *a, **kw)
    store.read = one
    return reads


def test_a_refresh_hashes_only_the_log_files_its_cache_has_not(tmp_path):
    """Commit and checkpoint files are created once: a refresh takes their sha256 from the cache
    it replaces (once the newest commit that cache names still has its own) instead of reading
    every commit since the newest Delta checkpoint again (up to a hundred a table a batch)."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    for v in range(30):
        (log / f"{v:020d}.json").write_text(f'{{"commitInfo":{{"v":{v}}}}}\n')
    st = storage.Store(str(tmp_path))
    reads = _reads(st)
    first = snapcache._log_state(st, "t", 29)
    assert len(reads) == 30 and [n for n, _ in first["files"]] == [f"{v:020d}.json" for v in range(30)]
    (log / f"{30:020d}.json").write_text('{"commitInfo":{"v":30}}\n')
    reads.clear()
    again = snapcache._log_state(st, "t", 30, dict(first["files"]))
    assert sorted(reads) == [f"{29:020d}.json", f"{30:020d}.json"]     # the newest it knew, and the new one
    reads.clear()
    assert again == snapcache._log_state(st, "t", 30) and len(reads) == 31  # what hashing every file gives
    # the newest commit it knew has another sha256 (a table rebuilt since): nothing known is used
    (log / f"{30:020d}.json").write_text('{"commitInfo":{"v":"again"}}\n')
    reads.clear()
    rebuilt = snapcache._log_state(st, "t", 30, dict(again["files"]))
    assert len(reads) == 1 + 31 and rebuilt == snapcache._log_state(st, "t", 30)   # (the check, then all)
    # an older commit's sha256 known wrong (damaged since it was hashed) stays wrong: readers refuse
    known = dict(rebuilt["files"], **{f"{3:020d}.json": "0" * 64})
    assert dict(snapcache._log_state(st, "t", 30, known)["files"])[f"{3:020d}.json"] == "0" * 64


def test_a_cache_with_a_wrong_log_hash_is_refused_after_the_next_refresh_too(scratch):
    # an older log file's sha256 the cache got wrong is kept by a refresh that does not read it,
    # and readers refuse that cache: the Delta tables decide
    for k in (3, 6):
        _expire_some(scratch, k)
    doc = json.loads(snapcache.document(LocalStore(scratch)))
    older = [f for f in doc["tables"]["manifest"]["files"] if f[0].endswith(".checkpoint.parquet")]
    assert older
    _rewrite_document(scratch, lambda d: [f.__setitem__(1, "0" * 64) for f in d["tables"]["manifest"]["files"]
                                          if f[0] == older[0][0]])
    assert snapcache.refresh(storage.Store(scratch)) and snapcache.load(LocalStore(scratch)) is None
    assert _files(scratch, True) == _files(scratch, False)
    _expire_some(scratch, 9)                       # the next Delta checkpoint: read, and the cache is used
    _cache_is_the_delta_snapshot(scratch)



def test_the_next_commit_of_this_process_computes_its_delta_from_memory(scratch, monkeypatch):
    """A writer that wrote the cache after its previous commit, with no commit since, computes the
    next delta from the base and delta it holds in memory: it reads neither back, and writes what a
    refresh that reads them writes. A base replaced since (another size) is read again."""
    _expire_some(scratch, 2)
    _expire_some(scratch, 4)                        # this process wrote a base and a delta
    reads: list = []
    real = storage.Store.read
    monkeypatch.setattr(storage.Store, "read", lambda self, rel, *a, **kw: (reads.append(rel), real(self, rel, *a, **kw))[1])
    cache = [paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA]
    _expire_some(scratch, 6)
    assert "snapshot-cache.delta.json" in _cache_files(scratch)
    assert not [r for r in reads if r in cache], reads
    _cache_is_the_delta_snapshot(scratch)
    _rewrite_document(scratch, lambda d: None)     # the same document, as one base another writer wrote
    reads.clear()
    _expire_some(scratch, 8)
    assert paths.SNAPSHOT_CACHE in reads
    _cache_is_the_delta_snapshot(scratch)
    monkeypatch.undo()
    _document_is_what_a_fresh_refresh_writes(scratch)


def _rewrite_document(path, change):
    """The cache as one base (no delta) holding its document with ``change`` applied."""
    doc = json.loads(snapcache.document(LocalStore(path)))
    change(doc)
    for rel in (paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA):
        if os.path.exists(os.path.join(path, rel)):
            os.remove(os.path.join(path, rel))
    open(os.path.join(path, paths.SNAPSHOT_CACHE), "wb").write(snapcache.encode(doc["tables"], doc["batch"],
                                                                               doc["files"]))


def test_a_batch_that_changes_many_rows_writes_a_base_without_a_diff(scratch, monkeypatch):
    """Past ``DELTA_MAX_ROWS`` changed rows a new base is written with no diff (its cost in time
    and memory grows with the changed rows: ~160,000 a batch at 10^10 messages). A batch whose own
    rows alone pass it does not even read the old cache; one under it still writes a delta."""
    def no_diff(*a, **kw):
        raise AssertionError("diffed")
    reads: list = []
    real = storage.Store.read
    monkeypatch.setattr(storage.Store, "read", lambda self, rel, *a, **kw: (reads.append(rel), real(self, rel, *a, **kw))[1])
    monkeypatch.setattr(snapcache, "_diff", no_diff)
    monkeypatch.setattr(snapcache, "DELTA_MAX_ROWS", 1)
    snapcache._WRITTEN.clear()
    assert snapcache.refresh(storage.Store(scratch))     # the latest batch (adopt's) owns every live row
    assert paths.SNAPSHOT_CACHE not in reads and paths.SNAPSHOT_CACHE_DELTA not in reads
    assert list(_cache_files(scratch)) == ["snapshot-cache.json"]
    _cache_is_the_delta_snapshot(scratch)
    _expire_some(scratch, 5)                             # removes more than one row: a new base, no diff
    assert list(_cache_files(scratch)) == ["snapshot-cache.json"]
    _cache_is_the_delta_snapshot(scratch)
    monkeypatch.undo()
    _expire_some(scratch, 8)                             # under the bound: a delta again
    assert "snapshot-cache.delta.json" in _cache_files(scratch)
    _cache_is_the_delta_snapshot(scratch)
    _document_is_what_a_fresh_refresh_writes(scratch)
