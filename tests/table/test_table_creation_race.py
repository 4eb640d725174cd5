"""Two first batches on an object store race to create a Delta table: the one that finds it
created meanwhile fails as a concurrent writer; it never appends its rows to the other's table."""
from __future__ import annotations

import pyarrow as pa
import pytest

from storelib.errors import ConcurrentWriteError
from storelib.io import storage
from storelib.table import deltacommit


def test_a_writer_that_found_no_table_never_appends_to_one_created_meanwhile(tmp_path, monkeypatch):
    from deltalake import DeltaTable, write_deltalake
    st = storage.Store(str(tmp_path))
    rows = pa.table({"x": [1]})

    def write(target, hooks=None, mode="append"):
        write_deltalake(target, rows, mode=mode)

    deltacommit._commit_object_store(st, "t", None, write)                    # the other writer: creates it
    monkeypatch.setattr(deltacommit, "open_table", lambda *a, **k: None)      # this one looked before that
    with pytest.raises(ConcurrentWriteError):
        deltacommit._commit_object_store(st, "t", None, write)
    assert DeltaTable(str(tmp_path / "t")).version() == 0                  # nothing appended
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().num_rows == 1
