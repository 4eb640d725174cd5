"""Two first batches on an object store race to create a Delta table: the one that finds it
created meanwhile fails as a concurrent writer; it never appends its rows to the other's table."""
from __future__ import annotations

import os

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


class _AfterPut(Exception):
    """What delta-rs raised after its PUT of a new table went in (reading it back in a race)."""


@pytest.mark.parametrize("planned", [None, 0], ids=["creating", "appending"])
@pytest.mark.parametrize("landed", ["ours", "another's", "none"])
def test_an_error_after_the_put_is_decided_by_the_version_it_aimed_at(tmp_path, planned, landed):
    """delta-rs can fail after its conditional PUT went in ("No files in log segment" from S3Proxy
    while a racing writer's put was refused): the version the commit aimed at decides. Ours is a
    commit, another writer's a lost race, none an unknown outcome (the error as it was)."""
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    st = storage.Store(str(tmp_path))
    uri = str(tmp_path / "t")
    if planned is not None:
        write_deltalake(uri, pa.table({"x": [0]}), mode="error")
    mine, theirs = deltacommit.commit_token(), deltacommit.commit_token()

    def write(target, hooks=None, mode="append"):
        if landed != "none":
            token = mine if landed == "ours" else theirs
            write_deltalake(uri, pa.table({"x": [1]}), mode=mode,
                            commit_properties=CommitProperties(custom_metadata=token))
        raise _AfterPut("Generic delta kernel error: No files in log segment")

    aimed = 0 if planned is None else planned + 1
    if landed == "ours":
        deltacommit._commit_object_store(st, "t", planned, write, mine)
    elif landed == "another's":
        with pytest.raises(ConcurrentWriteError, match="another writer committed"):
            deltacommit._commit_object_store(st, "t", planned, write, mine)
    else:
        with pytest.raises(_AfterPut):
            deltacommit._commit_object_store(st, "t", planned, write, mine)
    if landed == "none":
        assert not os.path.exists(f"{uri}/_delta_log/{aimed:020d}.json")
    else:
        assert DeltaTable(uri).version() == aimed
    if landed == "ours":                      # without ``mine`` the same failure stays unknown
        with pytest.raises(_AfterPut):
            deltacommit._commit_object_store(st, "t", aimed, write, None)
