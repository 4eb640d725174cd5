"""The object sweep's skip (storelib.table.objsweep.skip, its state: storelib.table.sweepstate)
on the moto S3 server, on stores of small batches whose manifest table compacts
(tests/support/objstores.py):

* A sweep after a completed one, with nothing changed, skips: it deletes nothing and reads no
  manifest data file. After a batch committed it reads only the data files new since the state,
  and still leaves nothing a full sweep would delete.
* A vacuum that removed a data file of the state, and an object of a committed attempt the state
  did not keep that no new data file names (under an old attempt, or under the new batch's beside
  what its rows name): the full sweep runs and deletes what is unnamed.
* A forged state that keeps an object no row names: a skipping sweep leaves it (the state can
  only make a sweep delete less), and the full sweep deletes it once the state does not apply. A
  damaged state: the full sweep (and a missing, cut short or foreign one, under
  ROCKETLAKE_FAULTS=all).
* A sweep that stops before its state is written (``before-sweep-state``) leaves the previous
  state, and the next sweep runs in full. (The SIGKILL there: tests/ops/test_object_sweep.py.)
* A sweep whose state does not apply (a vacuum removed a data file of it; an object no row names
  beside a batch new since, whose data files the skip read) makes each read once: the snapshot,
  the listings of the manifest directory and of the objects, each data file and list object, as
  many as a sweep of the same store without a state, and deletes the same.
* A live row's extent-list object missing: the skipping sweep refuses it as the full sweep does
  (``CorruptStore``), and neither changes the bucket.
* A live row's extent-list object there but damaged: the skip (which reads no list object of the
  state) deletes nothing and keeps its state; once the state does not apply, the full sweep
  refuses the store and deletes nothing.
* Rows verify rejects in the latest snapshot: the sweep refuses them (``CorruptStore``, the row
  check made once) before it deletes anything.
"""
from __future__ import annotations

import json
import re

import pytest

from support import objstores
from support.longrun import faults_only, long_only

pytestmark = pytest.mark.slow

BUCKET = "rocketlake-sweepstate"


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweepstate")
    with objstores.seeded(BUCKET, tmp_path_factory, tmp, objstores.BATCHES - 1) as (env, client, parts, cfg):
        yield env, client, parts, cfg, tmp


@pytest.fixture(scope="module")
def swept(seed):
    """``swept/``: the seed after a full sweep (its state written), which the tests that begin
    with one copy instead of sweeping a copy of the seed the same way each."""
    from storelib.table import objsweep
    st = _copy(seed, "swept")
    got = objsweep.sweep(st)
    assert not got["skipped"], got
    return seed


def _copy(seed, name: str, src: str = "seed"):
    from storelib.io import storage
    env, client, parts, cfg, tmp = seed
    return storage.Store(objstores.copy_prefix(client, BUCKET, src, name))


def _vacuumed(st) -> list:
    """Every replaced manifest data file vacuumed; the files it removed."""
    from storelib.format import paths
    from storelib.table import manifest
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    gone = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    dt = None
    return list(gone)


def _counted(monkeypatch) -> list:
    """The manifest data files the sweep opens from now on."""
    from storelib.table import objsweep
    opened: list = []
    real = objsweep._open_data_file

    def counting(store, f):
        opened.append(f)
        return real(store, f)
    monkeypatch.setattr(objsweep, "_open_data_file", counting)
    return opened


def _committed_prefix(st) -> str:
    from storelib.format import paths
    from storelib.table import manifest
    b = manifest.load_snapshot(st, queue_offsets=False).batches[0]
    return f"{paths.OBJECTS_DIR}/{b.batch_id}/{b.attempt_id}"


def test_a_sweep_with_nothing_changed_skips_and_one_after_a_batch_reads_only_the_new_files(seed, monkeypatch):
    from storelib.table import objsweep, sweepstate
    env, client, parts, cfg, tmp = seed
    st = _copy(seed, "same")
    opened = _counted(monkeypatch)
    first = objsweep.sweep(st)
    assert not first["skipped"] and first["data_files"] == len(opened) > 1, first
    state = sweepstate.read(st)
    assert state is not None and state.kept == set(objsweep.plan(st).kept_objects)
    opened.clear()
    again = objsweep.sweep(st)
    assert again["skipped"] and again["deleted"] == 0 and again["data_files"] == 0 and opened == [], again
    assert again["kept"] == first["kept"]
    with objstores.small_batches():
        objstores.ingest(st.uri, parts[-1:], cfg, objstores.BATCHES - 1)
    new = {f.rsplit("/", 1)[-1] for f in st.list_files("_rocketlake/manifest", recursive=False)
           if f.endswith(".parquet")} - state.data_files
    assert new, "the batch wrote no data file"
    opened.clear()
    after = objsweep.sweep(st)
    assert after["skipped"] and after["deleted"] == 0, after
    assert {f.rsplit("/", 1)[-1] for f in opened} <= new and after["data_files"] == len(opened), (opened, new)
    assert objsweep.plan(st).unnamed == {}, "the skip left objects a full sweep deletes"
    assert sweepstate.read(st).data_files == state.data_files | new
    opened.clear()
    assert objsweep.sweep(st)["skipped"] and opened == []


def test_a_vacuum_that_removed_a_data_file_of_the_state_makes_the_sweep_full(swept):
    from storelib.table import objsweep
    st = _copy(swept, "vacuum", "swept")
    unnamed = set(objsweep.plan(st).unnamed)
    assert unnamed == set()
    assert _vacuumed(st), "the vacuum removed no data file"
    unnamed = set(objsweep.plan(st).unnamed)
    assert unnamed, "the vacuum left nothing to sweep: the test tests nothing"
    got = objsweep.sweep(st)
    assert not got["skipped"] and got["deleted"] == len(unnamed), got
    assert not any(st.exists(o) for o in unnamed)
    assert objsweep.sweep(st)["skipped"]


@pytest.mark.parametrize("where", ["old-attempt", long_only("new-batch")])
def test_an_object_of_a_committed_attempt_the_state_did_not_keep_and_no_new_row_names_is_deleted(swept, where,
                                                                                                 monkeypatch):
    from storelib.ingest import commit as commit_stage
    from storelib.format import paths
    from storelib.table import objsweep
    env, client, parts, cfg, tmp = swept
    st = _copy(swept, f"stray-{where}", "swept")
    if where == "old-attempt":
        stray = f"{_committed_prefix(st)}/local-x/commitlog/stray.0"
        st.write_file(stray, [b"named by no row"])
    else:
        real = commit_stage.fault
        stray = ""

        def staging_stray(point: str) -> None:
            nonlocal stray
            if point == "before-delta-commit" and not stray:
                prefix = {"/".join(o.split("/")[:4]) for o in objstores.store_objects(client, BUCKET, f"stray-{where}")
                          if o.startswith(f"{paths.OBJECTS_DIR}/b{objstores.BATCHES - 1}/")}
                assert len(prefix) == 1, prefix
                stray = f"{prefix.pop()}/local-x/commitlog/stray.0"
                st.write_file(stray, [b"named by no row of its batch"])
            real(point)
        monkeypatch.setattr(commit_stage, "fault", staging_stray)
        with objstores.small_batches():
            objstores.ingest(st.uri, parts[-1:], cfg, objstores.BATCHES - 1)
        monkeypatch.undo()
    assert set(objsweep.plan(st).unnamed) == {stray}
    got = objsweep.sweep(st)
    assert not got["skipped"] and got["deleted"] == 1 and not st.exists(stray), got
    objstores.live_objects_there(client, BUCKET, f"stray-{where}", st.uri)


def test_a_forged_state_leaves_garbage_but_never_deletes_and_the_full_sweep_takes_it(swept):
    from storelib.table import objsweep, sweepstate
    env, client, parts, cfg, tmp = swept
    st = _copy(swept, "forged", "swept")
    before = objstores.store_objects(client, BUCKET, "forged")
    stray = f"{_committed_prefix(st)}/local-x/commitlog/stray.0"
    st.write_file(stray, [b"named by no row"])
    state = sweepstate.read(st)
    sweepstate.write(st, state.data_files, set(state.kept) | {stray})      # "every object is named"
    got = objsweep.sweep(st)
    assert got["skipped"] and got["deleted"] == 0 and st.exists(stray), got
    assert objstores.store_objects(client, BUCKET, "forged") == dict(before, **{stray: len(b"named by no row")})
    assert _vacuumed(st)                                                    # the state does not apply any more
    got = objsweep.sweep(st)
    assert not got["skipped"] and got["deleted"] > 0 and not st.exists(stray), got
    objstores.live_objects_there(client, BUCKET, "forged", st.uri)


# (make test: a changed byte; every reading of a state it refuses: tests/table/test_sweepstate.py)
@pytest.mark.parametrize("damage", ["altered"] + [faults_only(d) for d in ("missing", "cut", "version")])
def test_a_state_missing_damaged_or_foreign_makes_the_sweep_full(swept, damage):
    from storelib.format import paths
    from storelib.table import objsweep, sweepstate
    st = _copy(swept, f"damaged-{damage}", "swept")
    stray = f"{_committed_prefix(st)}/local-x/commitlog/stray.0"
    st.write_file(stray, [b"named by no row"])
    state = sweepstate.read(st)
    data = sweepstate.encode(state.data_files, set(state.kept) | {stray})   # a state that would keep it
    if damage == "missing":
        st.delete(paths.SWEEP_STATE)
    else:
        st.write_file(paths.SWEEP_STATE, [{"altered": data[:-1] + bytes([data[-1] ^ 1]), "cut": data[:-5],
                                           "version": data.replace(b'"version":1', b'"version":2')}[damage]])
    got = objsweep.sweep(st)
    assert not got["skipped"] and got["deleted"] == 1 and not st.exists(stray), got
    assert sweepstate.read(st) is not None


def test_a_sweep_stopped_before_its_state_leaves_the_previous_one_and_the_next_sweep_is_full(swept, monkeypatch):
    from storelib.format import paths
    from storelib.table import objsweep
    st = _copy(swept, "stopped", "swept")
    previous = st.read(paths.SWEEP_STATE)
    _vacuumed(st)
    unnamed = set(objsweep.plan(st).unnamed)
    assert unnamed

    def stop(point: str) -> None:
        if point == "before-sweep-state":
            raise KeyboardInterrupt(point)
    with pytest.raises(KeyboardInterrupt):
        objsweep.sweep(st, fault=stop)
    assert not any(st.exists(o) for o in unnamed) and st.read(paths.SWEEP_STATE) == previous
    opened = _counted(monkeypatch)
    got = objsweep.sweep(st)
    assert not got["skipped"] and got["deleted"] == 0 and got["data_files"] == len(opened) > 0, got
    assert st.read(paths.SWEEP_STATE) != previous


def _reads(st, monkeypatch):
    """What a sweep of ``st`` reads from now on (a Counter): its snapshot loads and its opens of
    a Delta table (``load_snapshot``, ``open_table``), its listings and the files it opens
    (``objstores.counted``: the manifest data files, the list objects, the state)."""
    from storelib.table import manifest
    seen = objstores.counted(st)

    def counting(name: str):
        real = getattr(manifest, name)

        def counted(*a, **kw):
            seen[name] += 1
            return real(*a, **kw)
        return counted
    for name in ("load_snapshot", "open_table"):
        monkeypatch.setattr(manifest, name, counting(name))
    return seen


@pytest.mark.parametrize("why", [long_only("vacuumed"), "unnamed-beside-a-new-batch"])
def test_a_sweep_whose_state_does_not_apply_reads_each_thing_once(swept, why, monkeypatch):
    from storelib.format import paths
    from storelib.io import storage
    from storelib.table import objsweep
    env, client, parts, cfg, tmp = swept
    name = f"once-{why}"
    st = _copy(swept, name, "swept")
    if why == "vacuumed":
        assert _vacuumed(st)
    else:
        st.write_file(f"{_committed_prefix(st)}/local-x/commitlog/stray.0", [b"named by no row"])
        with objstores.small_batches():
            objstores.ingest(st.uri, parts[-1:], cfg, objstores.BATCHES - 1)
    ref = storage.Store(objstores.copy_prefix(client, BUCKET, name, f"{name}-ref"))
    ref.delete(paths.SWEEP_STATE)                                   # the same store, swept in full
    if why == "unnamed-beside-a-new-batch":
        assert objsweep.skip(st) is None and objsweep.plan(st).unnamed, "the state applies: the test tests nothing"
    seen = _reads(st, monkeypatch)
    got = objsweep.sweep(st)
    monkeypatch.undo()
    full = _reads(ref, monkeypatch)
    want = objsweep.sweep(ref)
    monkeypatch.undo()
    assert not got["skipped"] and got["deleted"] == want["deleted"] > 0, (got, want)
    data_files = {k: n for k, n in seen.items() if k[0] == "open" and k[1].endswith(".parquet")}
    assert data_files and set(data_files.values()) == {1}, data_files
    assert seen["load_snapshot"] == 1 and seen["list", paths.MANIFEST_DIR] == 1 and \
        seen["list", paths.OBJECTS_DIR] == 1, seen
    assert seen == full, (seen, full)                  # (the state: read by both, missing in ``ref``)
    assert objstores.store_objects(client, BUCKET, name) == objstores.store_objects(client, BUCKET, f"{name}-ref")


@pytest.mark.parametrize("sweep", ["skipping", long_only("full")])
def test_a_live_rows_missing_extent_list_object_stops_the_skipping_and_the_full_sweep(swept, sweep):
    from storelib.errors import CorruptStore
    from storelib.table import manifest, objsweep
    env, client, parts, cfg, tmp = swept
    name = f"list-gone-{sweep}"
    st = _copy(swept, name, "swept")
    if sweep == "skipping":
        assert objsweep.skip(st) is not None, "the state does not apply: the test tests nothing"
    else:
        assert _vacuumed(st) and objsweep.plan(st).unnamed, "nothing for the full sweep to delete"
    live = manifest.load_snapshot(st, queue_offsets=False).files.values()
    lists = sorted(x[0] for r in live for x in json.loads(r["detail"] or "{}").get("extent_lists") or [])
    assert lists and st.exists(lists[0]), "no live row names an extent-list object: the test tests nothing"
    st.delete(lists[0])
    before = objstores.digest(client, BUCKET, name)
    with pytest.raises(CorruptStore, match=re.escape(f"its extent list object {lists[0]} is missing")):
        objsweep.sweep(st)
    assert objstores.digest(client, BUCKET, name) == before, "the refused sweep changed the bucket"


def _live_list_object(st) -> str:
    from storelib.table import manifest
    live = manifest.load_snapshot(st, queue_offsets=False).files.values()
    lists = sorted(x[0] for r in live for x in json.loads(r["detail"] or "{}").get("extent_lists") or [])
    assert lists and st.exists(lists[0]), "no live row names an extent-list object: the test tests nothing"
    return lists[0]


def test_a_live_rows_damaged_extent_list_object_is_never_swept_on_by_the_skip_nor_the_full_sweep(swept):
    from storelib.errors import CorruptStore
    from storelib.format import paths
    from storelib.table import objsweep
    env, client, parts, cfg, tmp = swept
    name = "list-damaged"
    st = _copy(swept, name, "swept")
    lst = _live_list_object(st)
    data = st.read(lst)
    st.write_file(lst, [data[:-1] + bytes([data[-1] ^ 1])])               # there, one byte changed
    state, before = st.read(paths.SWEEP_STATE), objstores.digest(client, BUCKET, name)
    got = objsweep.sweep(st)
    assert got["skipped"] and got["deleted"] == 0, got
    assert objstores.digest(client, BUCKET, name) == before and st.read(paths.SWEEP_STATE) == state
    assert _vacuumed(st), "the vacuum removed no data file"
    assert objsweep.skip(st) is None, "the state still applies: the test tests nothing"
    before = objstores.digest(client, BUCKET, name)
    with pytest.raises(CorruptStore, match="nothing is deleted"):
        objsweep.sweep(st)
    assert objstores.digest(client, BUCKET, name) == before, "a sweep went on from a damaged list object"


@pytest.mark.parametrize("state", [long_only("none"), "skipping"])
def test_a_sweep_refuses_rows_verify_rejects_before_it_deletes(swept, state, monkeypatch):
    from support import rowchecks
    from storelib.errors import CorruptStore
    from storelib.format import paths
    from storelib.table import manifest, objsweep
    env, client, parts, cfg, tmp = swept
    name = f"rowcheck-{state}"
    st = _copy(swept, name, "swept" if state == "skipping" else "seed")
    if state == "skipping":
        assert objsweep.skip(st) is not None, "the state does not apply: the test tests nothing"
    else:
        assert _vacuumed(st) and objsweep.plan(st).unnamed, "nothing for the sweep to delete: the test tests nothing"
        assert not st.exists(paths.SWEEP_STATE)
    real = manifest.load_snapshot
    monkeypatch.setattr(manifest, "load_snapshot", lambda *a, **kw: rowchecks.damaged(real(*a, **kw)))
    checked = rowchecks.counted_checks(monkeypatch)
    before = objstores.digest(client, BUCKET, name)
    with pytest.raises(CorruptStore, match="valid_bytes"):
        objsweep.sweep(st)
    assert len(checked) == 1, checked
    assert objstores.digest(client, BUCKET, name) == before, "the refused sweep changed the bucket"
