"""A mirror cycle that fails after its switch (its publish cut by an I/O error): its batch is
committed, so its staging is the next cycle's to publish, never undone (that lost the batch's new
files: the next cycle failed on a missing segment). No Spark, no JVM (tests/ops/test_mirror.py)."""
from __future__ import annotations

import pytest

from conftest import golden_set
from support import goldenlib
from support.mirrorhelp import records as _records, set_safe
from storelib.format import paths
from storelib.ingest import commit as commit_stage
from storelib.io import storage
from storelib.ops import mirror
from storelib.table import manifest
from storelib.verify import driver as verify

from test_mirror import SET, broker, golden_store  # noqa: F401


def test_a_cycle_whose_publish_fails_after_its_switch_is_published_by_the_next(broker, tmp_path, monkeypatch):  # noqa: F811
    store = str(tmp_path / "mirror")
    _, _, ts = _records(broker)
    set_safe(broker, int(ts[700]))
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    set_safe(broker, int(ts[1500]))

    def eio(*a, **k):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(commit_stage, "publish", eio)
    with pytest.raises(OSError):
        mirror.mirror_broker(broker, store, quiet=True)
    monkeypatch.undo()
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    assert len(snap.batches) == 2 and st.exists(f"{paths.STAGING_DIR}/{snap.batch['batch_id']}")
    set_safe(broker, int(ts.max()) + 1)
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    assert goldenlib.compare(golden_set(SET), store) == []
    assert not verify.verify_store(store, None, deep=True).problems
    assert not st.exists(paths.STAGING_DIR)
