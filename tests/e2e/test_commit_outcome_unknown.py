"""A writer on an object store whose switch's PUT got no answer (a timeout: not a refused
conditional put) while the PUT lands afterwards, after the writer's own read of the table found no
commit (``storelib.ingest.commit.outcome_unknown``). Nothing of the attempt may be undone: an
ingest keeps every object it staged (the committed batch reads whole), as an expiry keeps its
staged deletes (tests/e2e/test_expiry_deletes.py). ``make faults`` only (moto)."""
from __future__ import annotations

import pytest

from storelib.io import storage
from storelib.table import manifest

from test_crash_sim import _deep, _in_process_ingest, _open, inputs, store_a  # noqa: F401
from test_expiry_deletes import _copy_of_seed, _objects_of, s3_seed  # noqa: F401

pytestmark = [pytest.mark.slow]


def test_on_s3_an_ingest_whose_switch_got_no_answer_keeps_its_objects(inputs, s3_seed, monkeypatch):  # noqa: F811
    env, client = s3_seed
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    uri = _copy_of_seed(client, "ingest-unknown")
    real, sent = manifest.commit, []

    def no_answer(*a, **k):
        sent.append((a, k))
        raise OSError("Generic S3 error: error sending request: operation timed out")
    monkeypatch.setattr(manifest, "commit", no_answer)
    with pytest.raises(OSError, match="timed out"):
        _in_process_ingest(inputs, uri, "c", "C")
    monkeypatch.setattr(manifest, "commit", real)
    a, k = sent[0]
    real(*a, **dict(k, lease=None))                   # the PUT lands after the writer gave up
    st = storage.Store(uri)
    snap = manifest.load_snapshot(st)
    assert _open(uri) == ["A", "B", "C"]
    named = _objects_of(list(snap.files.values()), set(snap.files))
    assert named and not [o for o in named if not st.exists(o)], "objects of the committed batch deleted"
    assert _deep(uri, inputs) == []
