"""An expiry's staged deletes on an object store (storelib.table.staged_deletes), on the moto S3
server: the objects a document lists are checked against what the removed files' rows named in
the manifest table version before the expiry's commit, not only against the live rows.

A store of small batches (tests/support/objstores.py) is expired with its publish cut short
right after the commit, a commit that also compacted the manifest table (so the removed files'
add rows are gone from the latest version). Then the next writer's finish

* refuses (CorruptStore naming the document, nothing deleted) a document that also lists an
  object of an older version of a live file (an ``--as-of-batch`` read still needs it) or an
  object of an attempt that never committed;
* finishes the document as the expiry wrote it, and also after a cut-short delete took some of
  its objects, extent-list objects included;
* with the version before the commit vacuumed, takes only what the object sweep would delete
  now: a forged document naming an object a committed row names is refused, the bucket unchanged.

The local-store cases: tests/ops/test_staged_deletes.py.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from support import objstores
from support.longrun import long_only
from storelib.errors import CorruptStore, StoreError
from storelib.format import paths
from storelib.ingest import commit as commit_stage
from storelib.io import storage
from storelib.ops import expire as retention
from storelib.table import manifest, objsweep, staged_deletes

pytestmark = pytest.mark.slow

BUCKET = "rocketlake-staged-objects"
SEED = 3             # batches: every continued file's row names list objects by the second


class _CutShort(Exception):
    """The publish cut short right after the commit (as a crash there leaves it)."""


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("staged-objects")
    with objstores.seeded(BUCKET, tmp_path_factory, tmp, SEED) as (env, client, parts, cfg):
        yield client, parts[:SEED]


def _interrupted(client, parts, name: str, monkeypatch):
    """(store, its snapshot, the expiry's staging, its document as written) of a copy of the seed
    whose expiry committed (compacting the manifest table) and deleted nothing."""
    uri = objstores.copy_prefix(client, BUCKET, "seed", name)
    real = manifest.compaction_due

    def due(versions, *a, **k):         # (due whatever the rows: the expiry's commit compacts)
        return real(dataclasses.replace(versions, rows=(versions.rows or 0) + 10 ** 6), *a, **k)
    monkeypatch.setattr(manifest, "compaction_due", due)
    monkeypatch.setattr(retention.staged_deletes, "delete", lambda *a, **k: (_ for _ in ()).throw(_CutShort()))
    with pytest.raises(_CutShort):
        retention.expire(uri, 1, objstores.now_after(parts[-1]), quiet=True, housekeeping=False)
    monkeypatch.undo()
    st = storage.Store(uri)
    snap = manifest.load_snapshot(st)
    b = snap.batch
    assert b.operation == "expire" and snap.compaction is not None and \
        int(snap.compaction.detail["through_seq"]) == b.batch_seq, "the expiry's commit did not compact"
    staging = f"{paths.STAGING_DIR}/{b.batch_id}/{b.attempt_id}"
    doc = staged_deletes.read(st, staging)
    assert doc is not None and doc.objects and all(st.exists(o) for o in doc.objects)
    return st, snap, staging, doc


def _older_versions_object(client, st, snap, name: str) -> str:
    """An object that rows of older versions of a live file name and its live row does not."""
    live = set()
    for r in snap.files.values():
        live |= objstores.names_of(json.loads(r["detail"]))
    live = objstores.with_listed(client, BUCKET, name, live)
    older = set()
    for path, action, detail in objstores.data_file_rows(client, BUCKET, name):
        if action == "add" and path in snap.files:
            older |= objstores.names_of(detail)
    there = sorted(o for o in older - live if st.exists(o) and not o.endswith(".extents"))
    assert there, "no older version's object of a live file is left: the scenario tests nothing"
    return there[0]


def _write(st, staging: str, doc: staged_deletes.Staged) -> None:
    staged_deletes.stage(st, staging, doc, durable=True)


@pytest.mark.parametrize("how", ["older", long_only("dead")])
def test_a_document_naming_an_object_its_removed_files_did_not_have_is_refused(seed, how, monkeypatch):
    """``older``: an older version's object of a live file; ``dead``: an object of an attempt
    that never committed."""
    client, parts = seed
    name = f"forged-{how}"
    st, snap, staging, doc = _interrupted(client, parts, name, monkeypatch)
    if how == "older":
        extra = _older_versions_object(client, st, snap, name)
    else:
        extra = f"{paths.OBJECTS_DIR}/b9/deadattempt/local-x/commitlog/00000000000000000000.0"
        st.write_file(extra, [b"an attempt that never committed"])
    _write(st, staging, dataclasses.replace(doc, objects=doc.objects + (extra,)))
    with pytest.raises(CorruptStore) as e:
        commit_stage.finish_pending_publish(st, snap)
    assert staged_deletes.document(staging) in str(e.value) and "nothing was deleted" in str(e.value)
    assert f"{extra!r} is an object its removed files' rows did not name" in str(e.value)
    assert st.exists(extra) and all(st.exists(o) for o in doc.objects)


@pytest.mark.parametrize("cut", [long_only(False), True])
def test_the_document_as_the_expiry_wrote_it_is_finished(seed, cut, monkeypatch):
    """Also when the commit compacted the manifest table, and after a delete cut short (its
    objects, extent-list objects included, deleted in the order ``delete`` takes them)."""
    client, parts = seed
    st, snap, staging, doc = _interrupted(client, parts, f"legit-{cut}", monkeypatch)
    if cut:
        order = sorted(doc.objects, key=lambda o: o.endswith(".extents"))
        lists = [o for o in order if o.endswith(".extents")]
        keep = len(lists) // 2             # (some list objects gone, some there)
        assert keep >= 1, "the removed files name under two extent-list objects: the cut tests little"
        for o in order[:len(order) - keep]:
            st.delete(o)
    assert commit_stage.finish_pending_publish(st, snap) == 1
    assert not any(st.exists(o) for o in doc.objects) and not st.exists(staging)
    if cut:
        from storelib.verify import driver as verify
        assert verify.verify_store(st.uri).problems == []


def test_a_document_whose_version_before_was_vacuumed_is_finished_and_a_forged_one_refused(seed, monkeypatch):
    """The manifest table version before the expiry's commit vacuumed (its data files gone, as a
    vacuum of retention 0 leaves it): the document is checked against what the sweep would
    delete now (``objsweep.unnamed_among``: ``objsweep.plan``'s answer on the objects there, an
    older version's object of a live file and objects not there asked too). One that also lists an object of an attempt that never committed is refused
    still; the document as the expiry wrote it is finished."""
    client, parts = seed
    name = "vacuumed"
    st, snap, staging, doc = _interrupted(client, parts, name, monkeypatch)
    extra = f"{paths.OBJECTS_DIR}/b9/deadattempt/local-x/commitlog/00000000000000000000.0"
    st.write_file(extra, [b"an attempt that never committed"])
    older = _older_versions_object(client, st, snap, name)      # (while rows still name it)
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    gone = dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    dt = None
    assert gone, "the vacuum removed no data file: the version before the commit still reads"
    with pytest.raises(StoreError):
        staged_deletes.objects_before(st, snap.batch, set(doc.files))
    # the check's answer without listing the objects is the sweep's plan's, on every object there
    first = snap.batches[0]
    gone = f"{paths.OBJECTS_DIR}/{first.batch_id}/{first.attempt_id}/commitlog/never-written"
    asked = {*doc.objects, extra, older, gone}
    among = objsweep.unnamed_among(st, asked)
    assert {o for o in among if st.exists(o)} == set(objsweep.plan(st).unnamed) & asked
    assert set(doc.objects) <= among and extra not in among and st.exists(older)
    _write(st, staging, dataclasses.replace(doc, objects=doc.objects + (extra,)))
    with pytest.raises(CorruptStore, match="is an object its removed files' rows did not name"):
        commit_stage.finish_pending_publish(st, snap)
    assert st.exists(extra) and all(st.exists(o) for o in doc.objects)
    _write(st, staging, doc)
    assert commit_stage.finish_pending_publish(st, snap) == 1
    assert not any(st.exists(o) for o in doc.objects) and not st.exists(staging) and st.exists(extra)
    from storelib.verify import driver as verify
    assert verify.verify_store(st.uri).problems == []


def _live_names(client, st, snap, name: str) -> dict:
    """The objects the live rows name, by how: inline (extents, paged heads' layers), as
    extent-list objects, and only inside those list objects."""
    named = set()
    for r in snap.files.values():
        named |= objstores.names_of(json.loads(r["detail"]))
    out = {"inline": {o for o in named if not o.endswith(".extents")},
           "list": {o for o in named if o.endswith(".extents")},
           "listed": objstores.with_listed(client, BUCKET, name, named) - named}
    assert all(out.values()), f"the live rows name no object {[k for k, v in out.items() if not v]}: " \
                              "the scenario tests nothing"
    assert all(st.exists(o) for v in out.values() for o in v)
    return out


def test_a_forged_document_whose_version_before_was_vacuumed_takes_only_what_the_sweep_would(seed, monkeypatch):
    """The version before the expiry's commit vacuumed, so what the removed files' rows named
    there is unknown (``staged_deletes._swept_of``): a forged document naming an object a
    committed row names (the live rows' inline objects, their extent-list objects, what those
    list) is refused with the bucket unchanged, one naming every object of the store too; the
    sweep's check alone (``objsweep.unnamed_among``) takes none of them either; a document
    naming, beside its own, objects the sweep would delete now is finished, and takes only
    those."""
    client, parts = seed
    name = "vacuumed-forged"
    st, snap, staging, doc = _interrupted(client, parts, name, monkeypatch)
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    assert dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    dt = None
    with pytest.raises(StoreError):
        staged_deletes.objects_before(st, snap.batch, set(doc.files))
    live = _live_names(client, st, snap, name)
    every = set(objstores.store_objects(client, BUCKET, name))
    assert not objsweep.unnamed_among(st, set().union(*live.values())), "the sweep would take a live object"
    forged = [(o,) for o in (sorted(v)[0] for v in live.values())] + [tuple(sorted(every - set(doc.objects)))]
    for extra in forged:
        _write(st, staging, dataclasses.replace(doc, objects=doc.objects + extra))
        before = objstores.digest(client, BUCKET, name)
        with pytest.raises(CorruptStore) as e:
            commit_stage.finish_pending_publish(st, snap)
        assert "nothing was deleted" in str(e.value)
        assert objstores.digest(client, BUCKET, name) == before, f"a refused document ({extra[:3]}) changed the bucket"
    unnamed = set(objsweep.plan(st).unnamed) - set(doc.objects)
    assert unnamed, "the sweep would delete nothing but the document's own objects: the case tests nothing"
    _write(st, staging, dataclasses.replace(doc, objects=doc.objects + tuple(sorted(unnamed))))
    assert commit_stage.finish_pending_publish(st, snap) == 1
    assert set(objstores.store_objects(client, BUCKET, name)) == every - set(doc.objects) - unnamed
    objstores.live_objects_there(client, BUCKET, name, st.uri)
