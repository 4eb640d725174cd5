"""Extent lists stored once per batch (storelib.io.extentlists) on the moto S3 server: small-roll
ingested as many small batches with an inline bound of one extent (so nearly every continued
file's row names list objects, some merged), without Spark, in this process.

* the last batch, killed right after it wrote a list object, leaves the previous snapshot and
  no object behind once rerun;
* the export is byte-identical to RocketMQ's golden store and to the export of the same batches
  into a local store (which has no extents), and verify finds nothing wrong;
* a list object with one byte changed, and one deleted, is refused by readers (CorruptStore naming
  the file) and named by verify;
* an expiry keeps every object a live row names (its lists and what they list) and deletes the
  removed files' list objects with them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import goldenlib
from support import objstores, s3server
from conftest import ROOT, golden_set

pytestmark = pytest.mark.slow

BUCKET = "rocketlake-lists"
BATCHES = 3


def _ingest_all(uri: str, parts: list, cfg, first: int = 0) -> None:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    for k, part in enumerate(parts, first):
        run_ingest(LocalSession(), uri, str(part), "jsonl", cfg, batch_id=f"b{k}", quiet=True)


def _keys(client, prefix: str) -> set:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}      # (no writer adds a marker)


def _killed_then_rerun(env, client, uri: str, part, props, cfg) -> None:
    """The last batch SIGKILLed right after it wrote an extent-list object (``after-extent-list``;
    every other point of such a batch: tests/e2e/test_s3_extent_list_kills.py, ``make faults``):
    the snapshot is the previous batch's, file for file, and verifies; the rerun commits the batch
    and clears the killed attempt's objects, its list objects included."""
    from storelib.io import storage
    from storelib.table import manifest
    from storelib.verify import driver as verify
    st = storage.Store(uri)

    def files():
        snap = manifest.load_snapshot(st)
        return snap.batch["batch_id"], {p: (r["file_size"], r["valid_bytes"], r["checksum"]) for p, r in snap.files.items()}
    before = files()
    batch = f"b{BATCHES - 1}"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", uri, str(part),
                        str(props), batch], env=dict(os.environ, **env, ROCKETLAKE_TEST_INLINE_EXTENTS="1",
                                                     ROCKETLAKE_FAULT="after-extent-list", ROCKETLAKE_FAULT_SKIP="0"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, (r.returncode, r.stderr[-2000:])
    killed = _keys(client, f"store/_rocketlake/objects/{batch}/")
    assert any(k.endswith(".extents") for k in killed), sorted(killed)[:5]
    assert files() == before and verify.verify_store(uri).problems == []
    _ingest_all(uri, [part], cfg, BATCHES - 1)
    assert files()[0] == batch and not killed & _keys(client, "store/")


def _export(uri: str, out) -> None:
    from storelib.table.export import export_store
    export_store(uri, str(out))


def _same_files(a, b) -> bool:
    """Two exported stores hold the same bytes: every file by path, index files (named by the
    writer's clock) pairwise in name order."""
    def listing(root):
        out = {}
        for d, _, fs in os.walk(root):
            for f in fs:
                if f == "rocketlake.properties":      # names the store it was exported from
                    continue
                out[os.path.relpath(os.path.join(d, f), root)] = open(os.path.join(d, f), "rb").read()
        return out
    x, y = listing(a), listing(b)
    xi = [x.pop(k) for k in sorted(k for k in list(x) if k.startswith("index/"))]
    yi = [y.pop(k) for k in sorted(k for k in list(y) if k.startswith("index/"))]
    return x == y and xi == yi and len(x) > 0


@pytest.fixture(scope="module")
def lists_store(tmp_path_factory):
    """(env, client, uri, golden dir, tmp, local store path) of small-roll in BATCHES batches."""
    from storelib.io import extentlists
    tmp = tmp_path_factory.mktemp("extent-lists")
    g = golden_set("small-roll")
    parts, cfg = objstores.parts_of(tmp, BATCHES)
    props = tmp / "small.properties"           # (parts_of writes the config there)
    mp = pytest.MonkeyPatch()
    with s3server.moto(BUCKET) as (env, client):
        for k, v in env.items():
            mp.setenv(k, v)
        mp.setattr(extentlists, "INLINE_EXTENTS", 1)
        uri = f"s3://{BUCKET}/store"
        _ingest_all(uri, parts[:-1], cfg)
        _killed_then_rerun(env, client, uri, parts[-1], props, cfg)
        local = str(tmp / "local")
        _ingest_all(local, parts, cfg)
        try:
            yield env, client, uri, g, tmp, local
        finally:
            mp.undo()


def _rows(uri):
    from storelib.io import storage
    from storelib.table import manifest
    return manifest.load_snapshot(storage.Store(uri))


def test_small_batches_with_extent_lists_on_s3(lists_store):
    """The module docstring's three parts, in order, on one store (one moto server: a module
    whose tests ran on two workers would build it twice)."""
    _read_back_as_a_local_store_and_golden(*lists_store)
    for damage in ("flipped", "missing"):
        _a_damaged_or_missing_list_object_is_refused_and_named(*lists_store, damage)
    _expire_keeps_what_live_rows_name_and_deletes_removed_files_lists(*lists_store)


def _read_back_as_a_local_store_and_golden(env, client, uri, g, tmp, local):
    from storelib.verify import driver as verify
    snap = _rows(uri)
    lists = {p: json.loads(r["detail"]).get("extent_lists") for p, r in snap.files.items()}
    named = [x for v in lists.values() if v for x in v]
    assert any(p.startswith("commitlog/") for p, v in lists.items() if v), "no segment names a list"
    assert any(x[4] > 1 for x in named), "no lists were merged: the scenario tests little"
    for p, r in snap.files.items():       # inline: at most the bound, plus what the batch itself added
        assert len(json.loads(r["detail"]).get("extents") or []) <= 4, p
    _export(uri, tmp / "export-s3")
    _export(local, tmp / "export-local")
    assert goldenlib.compare(g, str(tmp / "export-s3")) == []
    assert goldenlib.compare(g, str(tmp / "export-local")) == []
    assert _same_files(tmp / "export-s3", tmp / "export-local")
    assert verify.verify_store(uri).problems == []


def _a_damaged_or_missing_list_object_is_refused_and_named(env, client, uri, g, tmp, local, damage):
    from storelib.errors import CorruptStore
    from storelib.io import extentlists
    from storelib.table.storefiles import open_files
    from storelib.verify import driver as verify
    snap = _rows(uri)
    path, lst = next((p, json.loads(r["detail"])["extent_lists"][0]) for p, r in sorted(snap.files.items())
                     if p.startswith("commitlog/") and json.loads(r["detail"]).get("extent_lists"))
    key = f"store/{lst[0]}"
    body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    open_files(uri)                             # read before the damage: this process has the lists cached
    if damage == "flipped":
        client.put_object(Bucket=BUCKET, Key=key, Body=body[:-1] + bytes([body[-1] ^ 1]))
    else:
        client.delete_object(Bucket=BUCKET, Key=key)
    try:
        problems = verify.verify_store(uri).problems      # (a long-lived process's verify: the UI's)
        assert any(str(p).startswith(path + "@") and lst[0] in str(p) for p in problems), (damage, problems)
        extentlists._CACHE.clear()              # (a fresh process has no cache)
        with pytest.raises(CorruptStore) as e:
            open_files(uri)
        assert e.value.path == path and lst[0] in e.value.what, damage
        problems = verify.verify_store(uri).problems
        assert any(str(p).startswith(path + "@") and lst[0] in str(p) for p in problems), (damage, problems)
    finally:
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
        extentlists._CACHE.clear()


def _expire_keeps_what_live_rows_name_and_deletes_removed_files_lists(env, client, uri, g, tmp, local):
    from storelib.format import paths
    from storelib.io import storage
    from storelib.ops.expire import expire
    from storelib.table import manifest, rowobjects
    from storelib.table.rows import manifest_rows
    from storelib.verify import driver as verify
    st = storage.Store(uri)
    before = manifest.load_snapshot(st)
    all_rows = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
    now = max(json.loads(x)["store_timestamp"] for x in open(tmp / f"part{BATCHES - 1}.jsonl")) + 2 * 3600 * 1000
    expire(uri, 1.0, now_ms=now, quiet=True)
    snap = manifest.load_snapshot(st)
    removed = set(before.files) - set(snap.files)
    assert removed and snap.files
    rows = [r for r in manifest_rows(all_rows) if r.action == "add" and r.path in removed]
    gone = {x[0] for r in rows for x in (r.detail.get("extent_lists") or [])}
    assert gone, "no removed file had extent lists: the scenario tests nothing"
    assert not [o for o in gone if st.exists(o)], "list objects of expired files left"
    live = rowobjects.objects_named(st, snap.files.values(), live=True)
    assert any(".extents" in o for o in live) and all(st.exists(o) for o in live)
    assert verify.verify_store(uri).problems == []
