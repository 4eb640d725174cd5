"""Object stores on the moto S3 server built of many small batches whose manifest table compacts,
and what their bucket holds: for the tests of the object sweep (storelib.table.objsweep) and of an
expiry's staged object deletes (storelib.table.staged_deletes).

small-roll is ingested in ``BATCHES`` batches, without Spark, in this process, with an inline
bound of one extent (nearly every continued file's row names extent-list objects, which later
batches split again) and the compaction due at every batch whose dead rows outnumber its live
ones: objects that only superseded rows named pile up, as at scale over many more batches.

The stores of the first k parts (k < ``BATCHES``) are built once per run (``seed_copies``: one
ingest of the parts in turn on a moto server of its own, a copy of the store kept on disk after
each batch, shared by the run's pytest-xdist workers) and uploaded into each module's bucket:
every module's seed is the same store, byte for byte, as one ingest of its parts leaves it.

``named_by_rows`` is this module's own reading of what the rows name (every row of every data
file in the manifest table's directory: extents, paged heads' layers, extent-list objects and
what they list), not the sweep's code. ``digest`` tells a bucket unchanged; ``counted`` counts a
store's listings and opens (what a sweep reads).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import zlib
from collections import Counter
from contextlib import contextmanager

import pytest

from conftest import golden_set
from support import goldenlib, s3server

SMALL = goldenlib.SMALL_ROLL_CONFIG
BATCHES = 6
OBJECTS = "_rocketlake/objects/"


def parts_of(tmp, batches: int = BATCHES) -> tuple[list, object]:
    """(small-roll's messages cut into ``batches`` JSON-lines files, its config) under ``tmp``."""
    from storelib.format.config import load_config
    g = golden_set("small-roll")
    props = tmp / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    parts = []
    for k in range(batches):
        p = tmp / f"part{k}.jsonl"
        p.write_text("".join(lines[k * len(lines) // batches:(k + 1) * len(lines) // batches]), encoding="utf-8")
        parts.append(p)
    return parts, load_config(str(props))


def now_after(part, hours: float = 2) -> int:
    """``hours`` after the newest message of ``part``."""
    return max(json.loads(x)["store_timestamp"] for x in open(part)) + int(hours * 3600 * 1000)


def ingest(uri: str, parts: list, cfg, first: int = 0) -> None:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    for k, part in enumerate(parts, first):
        run_ingest(LocalSession(), uri, str(part), "jsonl", cfg, batch_id=f"b{k}", quiet=True)


@contextmanager
def small_batches():
    """The inline bound and the compaction rule of the module docstring, for this process."""
    from storelib.io import extentlists
    from storelib.table import manifest
    mp = pytest.MonkeyPatch()
    mp.setattr(extentlists, "INLINE_EXTENTS", 1)
    mp.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    try:
        yield
    finally:
        mp.undo()


def shared_dir(tmp_path_factory):
    """The run's temporary directory: every pytest-xdist worker's base directory is in it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def seed_copies(shared) -> object:
    """The directory under ``shared`` whose ``<k>/`` holds the objects (keys relative to the
    store's prefix) of a store of the first k parts (1 <= k < ``BATCHES``), ingested as
    ``small_batches``. Built once, under a lock: the first process to ask builds it, the others
    wait for it and read it."""
    out = shared / "objstores-seed"
    with open(shared / "objstores-seed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "done").exists():
            shutil.rmtree(out, ignore_errors=True)
            _build_seed_copies(out)
            (out / "done").write_text("")
    return out


def _build_seed_copies(out) -> None:
    from concurrent.futures import ThreadPoolExecutor
    out.mkdir(parents=True)
    parts, cfg = parts_of(out)
    bucket, mp, had = "rocketlake-seed", pytest.MonkeyPatch(), {}
    with s3server.moto(bucket) as (env, client), ThreadPoolExecutor(8) as pool:
        for k, v in env.items():
            mp.setenv(k, v)
        try:
            for k in range(BATCHES - 1):
                with small_batches():
                    ingest(f"s3://{bucket}/seed", parts[k:k + 1], cfg, k)
                now, copy, last = digest(client, bucket, "seed"), out / str(k + 1), out / str(k)

                def keep(key: str, copy=copy, last=last, now=now, had=had) -> None:
                    """The object into the copy: a link to the last copy's file when unchanged."""
                    dest = copy / key[len("seed/"):]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    if had.get(key) == now[key]:
                        os.link(last / key[len("seed/"):], dest)
                    else:
                        dest.write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
                list(pool.map(keep, now))           # (list: a failed read raises here)
                had = now
        finally:
            mp.undo()


def _upload(client, bucket: str, src, prefix: str) -> None:
    from concurrent.futures import ThreadPoolExecutor
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs]

    def put(path: str) -> None:
        with open(path, "rb") as fh:
            client.put_object(Bucket=bucket, Key=f"{prefix}/{os.path.relpath(path, src)}", Body=fh.read())
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))


@contextmanager
def seeded(bucket: str, tmp_path_factory, tmp, batches: int):
    """(env, client, parts, cfg) of a moto server whose ``seed/`` holds the store of the first
    ``batches`` parts (``seed_copies``), the environment set for this process; the parts under
    ``tmp``."""
    assert 1 <= batches < BATCHES, batches
    copies = seed_copies(shared_dir(tmp_path_factory))
    parts, cfg = parts_of(tmp)
    mp = pytest.MonkeyPatch()
    with s3server.moto(bucket) as (env, client):
        for k, v in env.items():
            mp.setenv(k, v)
        try:
            _upload(client, bucket, copies / str(batches), "seed")
            yield env, client, parts, cfg
        finally:
            mp.undo()


def copy_prefix(client, bucket: str, src: str, dst: str) -> str:
    """The URI of a copy of ``src/`` at ``dst/``. The copies run on a few threads: the server
    (werkzeug's) closes every connection after its answer, so each request pays a connect and a
    server thread's start, which run in parallel (hundreds of objects: 3.4 s one by one, 1.5 s)."""
    from concurrent.futures import ThreadPoolExecutor

    def copy(key: str) -> None:
        client.copy_object(Bucket=bucket, Key=dst + key[len(src):], CopySource={"Bucket": bucket, "Key": key})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(copy, keys(client, bucket, src + "/")))       # (list: a failed copy raises here)
    return f"s3://{bucket}/{dst}"


def keys(client, bucket: str, prefix: str) -> dict:
    """key -> size of every object under ``prefix`` (a directory marker, a key ending in "/",
    too: no writer adds one, storelib.io.objkeys)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def store_objects(client, bucket: str, store: str) -> dict:
    """store-relative path -> size of every object under the store's ``_rocketlake/objects/``."""
    return {k[len(store) + 1:]: n for k, n in keys(client, bucket, f"{store}/{OBJECTS}").items()}


def _names(value, out: set) -> None:
    if isinstance(value, str):
        if value.startswith(OBJECTS):
            out.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _names(v, out)
    elif isinstance(value, list):
        for v in value:
            _names(v, out)


def data_file_rows(client, bucket: str, store: str, data_files: list | None = None) -> list:
    """(path, action, detail as JSON) of every row of the manifest table's data files
    (``data_files``: these keys; None: every one in its directory)."""
    import io

    import pyarrow.parquet as pq
    if data_files is None:
        data_files = [k for k in keys(client, bucket, f"{store}/_rocketlake/manifest/") if k.endswith(".parquet")
                      and "/_delta_log/" not in k]
    out = []
    for key in data_files:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for r in pq.read_table(io.BytesIO(body), columns=["path", "action", "detail"]).to_pylist():
            out.append((r["path"], r["action"], json.loads(r["detail"] or "{}")))
    return out


def names_of(detail) -> set:
    """The objects a row's detail names itself (not what its list objects list)."""
    out: set = set()
    _names(detail, out)
    return out


def named_by_rows(client, bucket: str, store: str, data_files: list | None = None) -> set:
    """The objects the rows of the manifest table's data files (``data_files``: these keys; None:
    every one in its directory) name: inline, as paged-head layers, as extent-list objects, and
    in the list objects that are there."""
    out: set = set()
    for _, _, detail in data_file_rows(client, bucket, store, data_files):
        _names(detail, out)
    return with_listed(client, bucket, store, out)


def with_listed(client, bucket: str, store: str, names: set) -> set:
    """``names`` and what the extent-list objects among them that are there list."""
    out = set(names)
    for lst in [o for o in names if o.endswith(".extents")]:
        try:
            body = client.get_object(Bucket=bucket, Key=f"{store}/{lst}")["Body"].read()
        except client.exceptions.NoSuchKey:
            continue
        _names(json.loads(zlib.decompress(body)), out)
    return out


def latest_data_files(uri: str) -> list:
    """The bucket keys of the data files of the manifest table's latest version."""
    from storelib.format import paths
    from storelib.io import storage
    from storelib.table import manifest
    dt = manifest.open_table(storage.Store(uri), paths.MANIFEST_DIR)
    out = [u.split("://", 1)[1].split("/", 1)[1] for u in dt.file_uris()]
    dt = None
    return out


def live_objects_there(client, bucket: str, name: str, uri: str) -> None:
    """Every object the latest snapshot's live rows name is in the bucket, and the store verifies."""
    from storelib.io import storage
    from storelib.table import manifest
    from storelib.verify import driver as verify
    live = manifest.load_snapshot(storage.Store(uri)).files.values()
    named = with_listed(client, bucket, name, set().union(*(names_of(json.loads(r["detail"])) for r in live)))
    gone = named - set(store_objects(client, bucket, name))
    assert not gone, f"{len(gone)} objects the live version names are gone, e.g. {sorted(gone)[0]}"
    assert verify.verify_store(uri).problems == []


def digest(client, bucket: str, store: str) -> dict:
    """key -> (ETag, size) of every object under ``store/``, directory markers included (a key
    ending in "/", which no writer may add: storelib.io.objkeys): equal only when no object of the
    store (its Delta tables, its objects, its sweep state) was added, removed or rewritten."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=store + "/")
    return {o["Key"]: (o["ETag"], o["Size"]) for page in pages for o in page.get("Contents", [])}


def counted(store) -> Counter:
    """From now on, count ``store``'s listings (``("list", rel)``: of the directory ``rel``) and
    opens of a file to read (``("open", rel)``), store-relative, through a file system that hands
    every call on to the store's own one (S3's directories and deletes as the store makes them,
    ``storelib.io.objkeys``). Delta's reads (deltalake's own client) are not counted."""
    import pyarrow.fs as pafs
    from storelib.io import objkeys
    real, root, seen = store.fs, store.path("").rstrip("/") + "/", Counter()

    def rel(path: str) -> str:
        return path[len(root):] if path.startswith(root) else path

    class Handler(pafs.FileSystemHandler):
        def get_type_name(self):
            return "counted-" + real.type_name

        def normalize_path(self, path):
            return real.normalize_path(path)

        def get_file_info(self, paths):
            return real.get_file_info(paths)

        def get_file_info_selector(self, selector):
            seen["list", rel(selector.base_dir)] += 1
            return real.get_file_info(selector)

        def create_dir(self, path, recursive):
            objkeys.make_dir(real, path)

        def delete_dir(self, path):
            objkeys.delete_tree(real, path)

        def delete_dir_contents(self, path, missing_dir_ok=False):
            real.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

        def delete_root_dir_contents(self):
            raise NotImplementedError("a store never empties its file system's root")

        def delete_file(self, path):
            objkeys.delete_file(real, path)

        def move(self, src, dest):
            objkeys.move(real, src, dest)

        def copy_file(self, src, dest):
            real.copy_file(src, dest)

        def open_input_stream(self, path):
            seen["open", rel(path)] += 1
            return real.open_input_stream(path)

        def open_input_file(self, path):
            seen["open", rel(path)] += 1
            return real.open_input_file(path)

        def open_output_stream(self, path, metadata):
            return real.open_output_stream(path, metadata=metadata)

        def open_append_stream(self, path, metadata):
            return real.open_append_stream(path, metadata=metadata)

        def __eq__(self, other):
            return self is other

        def __ne__(self, other):
            return self is not other
    store.fs = pafs.PyFileSystem(Handler())
    return seen
