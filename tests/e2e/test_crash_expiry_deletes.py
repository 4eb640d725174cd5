"""Power cuts inside an expiry's new durable steps: the write of its staged deletes before its
commit, the commit, its deletes and the drop of its staging (storelib.table.staged_deletes), on the
crash simulator (tests/support/crashfs, as tests/e2e/test_crash_sim.py), with an INGEST as the
next writer, not an expire.

The store-wide expiry of A + B runs once on the simulator. In the state a cut leaves: the store
opens with A, B and maybe the expiry (surely, once its run returned); until its switch the
store's files are as before; verify --deep is clean. Then batch C is ingested: the files are,
byte for byte, those of the seed followed by an uninterrupted expiry and C (or by C alone when
the expiry did not commit): no expired file is left for a broker to load, and no staging.

``make test`` cuts once, where the expiry's deletes are made but not all durable (the first
directory fsync after them); ``make crash`` (CRASH_POINTS=0) at every durable step from the
staged write on.
"""
from __future__ import annotations

import os
import shutil

import pytest

from storelib.format import paths
from storelib.io import storage

from test_crash_sim import ALL_POINTS, _deep, _in_process_ingest, _open, _record, inputs, store_a  # noqa: F401
from test_nothing_lost import files_state
from test_expiry_deletes import now_of, seed_of_a_and_b

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def refs(inputs, store_a, tmp_path_factory):  # noqa: F811
    """(seed of A and B, its files, the expired paths, files after the expiry and C, after C alone)."""
    from storelib.ops.expire import expire
    tmp = tmp_path_factory.mktemp("crash-expiry-deletes")
    seed = seed_of_a_and_b(inputs, store_a, tmp)
    out = {"kept": None}
    for name in ("expired", "kept") if ALL_POINTS else ("expired",):     # (make test's cut is after the switch)
        ref = str(tmp / name)
        shutil.copytree(seed, ref)
        if name == "expired":
            removed = expire(ref, 1, now_ms=now_of(inputs), quiet=True)["removed"]
        _in_process_ingest(inputs, ref, "c", "C", durable=False)
        out[name] = files_state(ref)
    return seed, files_state(seed), removed, out["expired"], out["kept"]


def _cuts(fs) -> list:
    """Every distinct durable state from the staged deletes' write on; or (make test) the first
    durable step after the deletes began."""
    cuts = fs.cut_points(distinct=True)
    if ALL_POINTS:
        staged = next((ev.n for ev in fs.events if ev.path and f"/{paths.STAGING_DIR}/" in ev.path), 0)
        return [k for k in cuts if k >= staged - 1]
    first = next(ev.n for ev in fs.events if ev.kind == "unlink" and ev.path      # (paths from the mount's root)
                 and ev.path.split("/")[2:3] in ([d] for d in paths.BROKER_DIRS))
    return [next(k for k in cuts if k > first)]


def test_power_cuts_inside_an_expirys_staged_deletes(inputs, refs, tmp_path):  # noqa: F811
    seed, before, removed, with_expiry, without = refs
    fs, out = _record(tmp_path, seed, ["expire", "{store}", 1, now_of(inputs)])
    assert out["status"] == "committed" and sorted(out["removed"]) == sorted(removed)
    returned = fs.recording.marks()["returned"]
    n = 0
    for k in _cuts(fs):
        label = f"cut after event {k} ({fs.event(k).kind} {fs.event(k).path})"
        state = fs.crash_state(k, str(tmp_path / f"state-{k}"))
        store = os.path.join(state, "store")
        seen = _open(store)
        assert seen[:2] == ["A", "B"] and len(seen) in (2, 3), (label, seen)
        if k >= returned:
            assert len(seen) == 3, (label, "the expiry returned, but is not visible")
        if len(seen) == 2:
            assert files_state(store) == before, (label, "files changed before the switch")
        assert _deep(store, inputs) == [], label
        left = [p for p in removed if os.path.exists(os.path.join(store, p))]
        assert ALL_POINTS or (len(seen) == 3 and left), (label, "make test's cut is to leave deletes to finish")
        assert _in_process_ingest(inputs, store, "c", "C", durable=False)["status"] == "committed", label
        assert files_state(store) == (with_expiry if len(seen) == 3 else without), label
        st = storage.Store(store)
        assert not (len(seen) == 3 and [p for p in removed if st.exists(p)]), (label, "expired files left")
        assert _deep(store, inputs) == [] and not st.exists(paths.STAGING_DIR), label
        shutil.rmtree(state)
        n += 1
    assert n >= (8 if ALL_POINTS else 1)
