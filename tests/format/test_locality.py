"""One test of locality for every store and input URI (``format.paths.is_local``), used by the
stores, the checks before a job and the store kind alike."""
from __future__ import annotations

import pytest

from storelib.format import paths


@pytest.mark.parametrize("uri, local, path", [
    ("store", True, "store"), ("/data/store", True, "/data/store"), ("./a/b", True, "./a/b"),
    ("file:///data/store", True, "/data/store"), ("FILE:///data/store", True, "/data/store"),
    ("/tmp/odd://name", True, "/tmp/odd://name"),          # not a scheme: a path with "://" in it
    ("s3://bucket/store", False, None), ("gs://bucket/store", False, None),
    ("hdfs://namenode:9000/store", False, None), ("abfss://c@acct.dfs.core.windows.net/s", False, None),
])
def test_is_local(uri, local, path):
    assert paths.is_local(uri) is local
    assert paths.local_root(uri) == path


def test_one_function_everywhere():
    from storelib.io import filesystems, localstore, storage
    from storelib.table import storeinfo
    assert storage.is_local is filesystems.is_local is paths.is_local is localstore.is_local
    assert storage.local_path is paths.local_path
    assert not hasattr(storeinfo, "_local_root") and not hasattr(localstore, "_is_local")
    assert storeinfo.store_kind("s3://bucket/store") == storeinfo.StoreKind.REMOTE
