"""storelib.io.objkeys on the suite's S3 servers (moto, and S3Proxy, which refuses botocore's bulk
DeleteObjects for want of a Content-MD5): a store's writes, moves and deletes on S3 add no
directory marker object (a key ending in "/") to its bucket, so a writer that takes its lease and
then refuses leaves a bucket without markers as it found it; markers an earlier writer left go
with the tree they are in."""
from __future__ import annotations

import pytest

from support import s3server

BUCKET = "keys"
SERVERS = {"moto": s3server.moto, "s3proxy": s3server.s3proxy}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(request):
    with SERVERS[request.param](BUCKET) as (env, client):
        yield env, client


@pytest.fixture()
def s3(server, monkeypatch):
    env, client = server
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return client


def _keys(client, prefix: str) -> list:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_a_store_on_s3_writes_moves_and_deletes_without_directory_markers(s3, tmp_path):
    from storelib.io import storage
    from storelib.table.writerlease import WriterLease
    for k in ("st/commitlog/00000000000000000000", "st/_rocketlake/manifest/x.parquet"):
        s3.put_object(Bucket=BUCKET, Key=k, Body=b"1")
    st = storage.Store(f"s3://{BUCKET}/st")
    lease = WriterLease(st, "b1")
    lease.acquire()
    st.write_file("_rocketlake/staging/b1/a/consumequeue/t/0/00000000000000000000", [b"q" * 20])
    st.write_objects(lambda i: f"_rocketlake/objects/b1/a/part{i}", [b"o" * 10], part_size=4)
    st.publish("_rocketlake/staging/b1/a/consumequeue/t/0/00000000000000000000",
               "consumequeue/t/0/00000000000000000000")
    st.delete("_rocketlake/objects/b1/a/part0")
    st.delete("_rocketlake/objects/b1")
    assert storage.remove_dir_if_empty(st, "_rocketlake/staging")
    lease.release()
    assert [k for k in _keys(s3, "st/") if k.endswith("/")] == []
    assert _keys(s3, "st/") == ["st/_rocketlake/manifest/x.parquet", "st/commitlog/00000000000000000000",
                                "st/consumequeue/t/0/00000000000000000000"]
    assert st.read("consumequeue/t/0/00000000000000000000") == b"q" * 20
    assert st.list_dirs("consumequeue") == ["t"] and st.exists("_rocketlake/manifest")


def test_a_tree_goes_with_the_markers_an_earlier_writer_left(s3):
    from storelib.io import objkeys, storage
    names = ["old/d/", "old/d/e/", "old/d/e/f", "old/d/g", "old/h"] + [f"old/d/many/{i}" for i in range(1003)]
    for k in names:
        s3.put_object(Bucket=BUCKET, Key=k, Body=b"" if k.endswith("/") else b"1")
    st = storage.Store(f"s3://{BUCKET}/old")
    st.delete("d")
    assert _keys(s3, "old/") == ["old/h"]
    objkeys.delete_tree(st.fs, f"{BUCKET}/old/none")           # nothing there: no error
    st.delete("h")
    st.delete("h")                                              # gone already: no error
    assert _keys(s3, "old/") == []


def test_a_spark_worker_with_the_shipped_empty_settings_deletes(s3, monkeypatch):
    """A Spark worker's environment holds the settings the driver left unset as empty values
    (objstore.ship): botocore took an empty AWS_PROFILE for a profile named "" (ProfileNotFound)."""
    from storelib.io import filesystems, objstore, storage
    for k, v in objstore.executor_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(filesystems, "_fs_cache", {})
    s3.put_object(Bucket=BUCKET, Key="worker/x", Body=b"1")
    storage.Store(f"s3://{BUCKET}/worker").delete("x")
    assert _keys(s3, "worker/") == []


def test_a_lease_taken_and_released_and_a_refused_expiry_add_no_key(s3):
    """A store copied without markers (its keys only): the writer lease taken and released, and
    an expiry that takes the lease and refuses (no manifest: an unadopted copy), leave every key
    of the bucket under it as they were (``objstores.digest``: markers included)."""
    from support import objstores
    from storelib.errors import ExpireError
    from storelib.io import storage
    from storelib.ops.expire import expire
    from storelib.table.writerlease import WriterLease
    for k in ("copy/commitlog/00000000000000000000", "copy/consumequeue/t/0/00000000000000000000"):
        s3.put_object(Bucket=BUCKET, Key=k, Body=b"1")
    before = objstores.digest(s3, BUCKET, "copy")
    st = storage.Store(f"s3://{BUCKET}/copy")
    lease = WriterLease(st, "b1")
    lease.acquire()
    assert objstores.digest(s3, BUCKET, "copy").keys() == before.keys() | {f"copy/{lease_path()}"}
    lease.release()
    assert objstores.digest(s3, BUCKET, "copy") == before
    with pytest.raises(ExpireError, match="no rocketlake manifest"):
        expire(st.uri, 48, now_ms=1, quiet=True)
    assert objstores.digest(s3, BUCKET, "copy") == before


def lease_path() -> str:
    from storelib.format import paths
    return paths.LEASE_PATH
