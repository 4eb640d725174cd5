"""One way to open a snapshot (storelib/table/snapshots.py) and the typed rows it hands out
(storelib/table/rows.py): every command reads the store's tables once, and a batch records every
configuration key a later operation reads of it.

The commands run in this process without Spark (``--local always``) on a store of two ingested
batches; a snapshot read is a read of the snapshot cache or one read of the Delta tables.
"""
from __future__ import annotations

import io
import json
import os
import pickle
from contextlib import redirect_stderr, redirect_stdout

import pytest

from conftest import ROOT
from storelib.format import paths
from storelib.format.config import FILE_SHAPING_KEYS, load_config
from storelib.io import storage
from storelib.table import manifest, snapcache

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")


def _cli(main, argv: list) -> int:
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
    assert rc in (0, None), err.getvalue()[-2000:]
    return rc


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("snapinputs")
    lines = open(SAMPLE, encoding="utf-8").read().splitlines()[:400]
    half = len(lines) // 2
    out = []
    for i, part in enumerate((lines[:half], lines[half:])):
        p = d / f"part{i}.jsonl"
        p.write_text("\n".join(part) + "\n", encoding="utf-8")
        out.append(str(p))
    first = json.loads(lines[0])
    return out, first["topic"], dict(first["properties"])["KEYS"].split(" ")[0]


class Loads:
    """Snapshot reads: of the cache (``snapcache.load``) and of the Delta tables (the checkpoints
    table read that every Delta read starts with). The cache's own refresh after a commit (which
    reads back what was committed) is not the command's."""

    def __init__(self, monkeypatch):
        self.cache = self.delta = 0
        self._refreshing = False
        load, rows, refresh = snapcache.load, manifest._table_rows, snapcache.refresh

        def counted_load(*a, **k):
            self.cache += not self._refreshing
            return load(*a, **k)

        def counted_rows(store, rel, *a, **k):
            self.delta += rel == paths.CHECKPOINTS_DIR and not self._refreshing
            return rows(store, rel, *a, **k)

        def uncounted_refresh(*a, **k):
            self._refreshing = True
            try:
                return refresh(*a, **k)
            finally:
                self._refreshing = False
        monkeypatch.setattr(snapcache, "load", counted_load)
        monkeypatch.setattr(manifest, "_table_rows", counted_rows)
        monkeypatch.setattr(snapcache, "refresh", uncounted_refresh)

    def reset(self) -> None:
        self.cache = self.delta = 0

    @property
    def total(self) -> int:
        return self.cache + self.delta


def _ingest(store: str, path: str, batch: str) -> None:
    from storelib.cli import ingest
    _cli(ingest.main, ["--store", store, "--input", path, "--local", "always", "--quiet", "--batch-id", batch])


@pytest.fixture(scope="module")
def two_batches(inputs, tmp_path_factory):
    store = str(tmp_path_factory.mktemp("snapstore") / "store")
    _ingest(store, inputs[0][0], "b1")
    _ingest(store, inputs[0][1], "b2")
    return store


def test_each_command_reads_its_snapshot_once(inputs, two_batches, tmp_path, monkeypatch):
    from storelib.cli import query, verify
    (_, second), topic, key = inputs
    loads = Loads(monkeypatch)
    key_args = ["key", "--store", two_batches, "--topic", topic, "--key", key, "--local", "always"]
    seen = {}
    for name, main, argv in (
            ("query key", query.main, key_args),
            ("query range", query.main, ["range", "--store", two_batches, "--begin", "0", "--end", "9999999999999",
                                         "--local", "always", "--output", str(tmp_path / "range.jsonl")]),
            ("verify", verify.main, ["--store", two_batches])):
        loads.reset()
        _cli(main, argv)
        seen[name] = (loads.cache, loads.delta)
    # the latest batch: the cache serves every command, once
    assert seen == {"query key": (1, 0), "query range": (1, 0), "verify": (1, 0)}
    # an earlier batch: the cache cannot serve it; the Delta tables are read once
    loads.reset()
    _cli(query.main, key_args + ["--as-of-batch", "b1"])
    assert (loads.cache, loads.delta) == (1, 1)
    # an ingest: its checks before any JVM read the snapshot once, its driver once more after it
    # holds the lease (the store may have moved on in between)
    copy = str(tmp_path / "copy")
    _ingest(copy, inputs[0][0], "b1")
    loads.reset()
    _ingest(copy, second, "b2")
    assert (loads.cache, loads.delta) == (1, 1)


def test_a_batch_records_the_flush_type_that_expire_and_repair_follow(inputs, tmp_path):
    """Ingest recorded only the file-shaping keys, so expire and repair, which follow the
    store's flushDiskType, read SYNC_FLUSH from an ASYNC_FLUSH store (and fsync'd)."""
    from storelib.ingest.driver import run_ingest
    from storelib.ops import expire
    from storelib.runtime.localrun import LocalSession
    store = str(tmp_path / "store")
    cfg = load_config(None, {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 1 << 20})
    run_ingest(LocalSession(), store, inputs[0][0], "jsonl", cfg, batch_id="b1", quiet=True)
    snap = manifest.load_snapshot(storage.Store(store))
    recorded = json.loads(snap.batch["config"])
    assert recorded["flushDiskType"] == "ASYNC_FLUSH"
    assert {k: recorded[k] for k in FILE_SHAPING_KEYS} == cfg.file_shaping()
    assert expire._durable(snap) is False


def test_rows_are_typed_read_only_and_parse_their_json_once(two_batches):
    from storelib.table.rows import BatchRow, FileKind, ManifestRow
    from storelib.table.snapshots import open_snapshot
    store = storage.Store(two_batches)
    snap = open_snapshot(store, history=True)
    assert snap.source == "delta" and [b.batch_id for b in snap.batches] == ["b1", "b2"]
    idx = snap.of_kind(FileKind.INDEX)[0]
    assert isinstance(idx, ManifestRow) and idx.kind == "index" == FileKind.INDEX
    assert idx.index_header.index_count == idx.detail["header"]["index_count"]
    assert idx.detail is idx.detail                      # parsed once
    with pytest.raises(TypeError):
        idx["valid_bytes"] = 0
    assert pickle.loads(pickle.dumps(idx)) == idx and json.loads(json.dumps(idx)) == dict(idx)
    assert manifest.remove_row(idx, "e", 3, 0, "{}")["action"] == "remove"      # writers build new rows
    old = BatchRow(dict(snap.batch, config=json.dumps({k: 7 for k in ("maxIndexNum",)})))
    assert old.durable and old.rocketmq_line == "5"       # a batch of an older version: its defaults
    assert old.matches("b2") and old.matches(2) and old.matches("2") and not old.matches("b1")
    # --version and --as-of-batch: the earlier of the two
    assert open_snapshot(store, "b1").batch_id == "b1"
    assert open_snapshot(store, version=0).batch_id == "b1"
    assert open_snapshot(store, "b1", version=1).batch_id == "b1"
    with pytest.raises(KeyError, match="no committed batch 'nope'"):
        open_snapshot(store, "nope")
    # the cache and the Delta tables give the same snapshot
    cached = open_snapshot(store)
    assert cached.source == "cache" and dict(cached.files) == dict(snap.files) and cached.batch == snap.batch
    assert cached.config == snap.config and cached.latest == snap.latest == snap.batch and not snap.pinned
    assert open_snapshot(store, "b1").pinned


def test_expire_reads_its_snapshot_once_and_again_only_when_the_tables_moved(inputs, tmp_path, monkeypatch):
    """The command's check before the lease reads the Delta tables (with their versions); under
    the lease the expiry goes on from that read unless a writer committed in between."""
    from storelib.cli import expire as expire_cli
    from storelib.ops import expire
    from storelib.table.snapshots import open_snapshot
    from storelib.cli import ingest
    store, props = str(tmp_path / "store"), tmp_path / "small.properties"
    props.write_text("mappedFileSizeCommitLog=32768\n")              # several segments: some expire
    for part, batch in ((inputs[0][0], "b1"), (inputs[0][1], "b2")):
        _cli(ingest.main, ["--store", store, "--input", part, "--local", "always", "--quiet", "--batch-id", batch,
                           "--config", str(props)])
    loads = Loads(monkeypatch)
    _cli(expire_cli.main, ["--store", store, "--reserved-hours", "0", "--now", "9999999999999", "--quiet"])
    assert (loads.cache, loads.delta) == (0, 1)
    snap = open_snapshot(storage.Store(store), history=True)
    assert snap.batch.operation == "expire" and snap.batch.batch_seq == 3        # it did expire
    # read before another writer committed: read again under the lease, and the expiry is of the new batch
    _cli(ingest.main, ["--store", store, "--input", inputs[0][0], "--local", "always", "--quiet", "--batch-id", "b3"])
    loads.reset()
    s = expire.expire(store, 0, 9999999999999, quiet=True, housekeeping=False, snapshot=snap)
    assert loads.delta == 1
    after = open_snapshot(storage.Store(store), history=True)
    assert [b.batch_id for b in after.batches][-2] == "b3" and after.batch.batch_seq == 5
    assert s["commitlog_removed"] >= 1
    # read under nothing that moved: no second read
    loads.reset()
    expire.expire(store, 0, 9999999999999, quiet=True, housekeeping=False, snapshot=after)
    assert loads.delta == 0
