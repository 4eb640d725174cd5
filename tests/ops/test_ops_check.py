"""Every operation checks the manifest rows it builds on before it acts (issue 35 item 6):
``storelib.table.rowcheck``, run at the entry of ingest / append, expire (store-wide and per
topic), adopt, export, the readers, inspect and repair. A store whose rows verify rejects is
refused with one line, the operation's exit status for a damaged store (1), and nothing changed.

The damages are hand edits of the manifest table's rows (the table rewritten, as an edit of its
Parquet file would leave it): a path named twice, a segment's or a queue file's valid_bytes set
to 10."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from support.opshelp import edit_row, small_config, tree_digest
from storelib.errors import CorruptStore
from storelib.io import storage
from storelib.table import manifest, rowcheck
from storelib.table.snapshots import open_snapshot

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")
NOW = 1717200000002 + 30 * 86400_000           # a month after the sample's store times


def _lines(src: str, out: str, start: int, n: int) -> str:
    with open(src, encoding="utf-8") as fh:
        lines = fh.readlines()[start:start + n]
    with open(out, "w", encoding="utf-8") as fh:
        fh.writelines(lines)
    return out


def _ingest(store: str, path: str) -> dict:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    return run_ingest(LocalSession(), store, path, "jsonl", small_config(), quiet=True)


def edit_rows(store: str, pick, **changes) -> dict:
    """Change the first live manifest row ``pick`` accepts, in place (``opshelp.edit_row``).
    Returns the row as it was."""
    return edit_row(store, pick, lambda r: r.update(changes))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Two batches of the sample (1,000 messages each) in small files (64 KiB segments, 30-unit
    queue files, 255-entry index files): 8 segments, 32 queues of 2 or 3 files, 17 index files."""
    tmp = tmp_path_factory.mktemp("opscheck")
    store = str(tmp / "base")
    _ingest(store, _lines(SAMPLE, str(tmp / "a.jsonl"), 0, 1000))
    _ingest(store, _lines(SAMPLE, str(tmp / "b.jsonl"), 1000, 1000))
    _lines(SAMPLE, str(tmp / "c.jsonl"), 0, 50)
    return tmp, store


def _path_twice(store: str) -> dict:
    """One index row of the first batch names the batch's first index file: that file twice,
    its own file nowhere."""
    idx = [r["path"] for r in manifest.load_snapshot(storage.Store(store)).of_kind("index") if r["batch_seq"] == 1]
    return edit_rows(store, lambda r: r["path"] == idx[1], path=idx[0])


DAMAGES = {
    "path-twice": _path_twice,
    "segment-valid-bytes-10": lambda store: edit_rows(store, lambda r: r["kind"] == "commitlog", valid_bytes=10),
    "queue-valid-bytes-10": lambda store: edit_rows(store, lambda r: r["kind"] == "consumequeue", valid_bytes=10),
}


@pytest.fixture(scope="module")
def damaged(base):
    """damage name -> a store with that damage (each operation runs on a copy of it)."""
    tmp, store = base
    out = {}
    for name, damage in DAMAGES.items():
        d = str(tmp / f"damaged-{name}")
        shutil.copytree(store, d)
        damage(d)
        out[name] = d
    return out


def _copy(src: str, tmp) -> str:
    dst = str(tmp / "store")
    shutil.copytree(src, dst)
    return dst


def _op_ingest(store, tmp, base_tmp):
    return _ingest(store, str(base_tmp / "c.jsonl"))


def _op_expire(store, tmp, base_tmp):
    from storelib.ops.expire import expire
    return expire(store, 1, now_ms=NOW, quiet=True, housekeeping=False)


def _op_expire_topic(store, tmp, base_tmp):
    from storelib.ops.expire import expire
    return expire(store, None, now_ms=NOW, quiet=True, housekeeping=False, topic_rules={"orders": 1})


def _op_export(store, tmp, base_tmp):
    from storelib.table.export import export_store
    return export_store(store, str(tmp / "exported"))


def _op_query(store, tmp, base_tmp):
    from storelib.read.localscan import scan_range_local
    return scan_range_local(store, 0, NOW)


def _op_stats(store, tmp, base_tmp):
    from storelib.ops import inspect
    s = storage.Store(store)
    return inspect.stats(s, manifest.load_snapshot(s))


def _op_repair(store, tmp, base_tmp):
    from storelib.ops.repair import repair
    return repair(store, apply=True, quiet=True)


def _op_adopt(store, tmp, base_tmp):
    from storelib.ops.adopt import adopt
    return adopt(None, store, store, small_config(), quiet=True)


OPS = {"ingest": _op_ingest, "expire": _op_expire, "expire-topic": _op_expire_topic, "export": _op_export,
       "query-range": _op_query, "inspect-stats": _op_stats, "repair": _op_repair, "adopt": _op_adopt}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_verify_reports_the_damage(damaged, damage):
    from storelib.verify.driver import verify_store
    assert verify_store(damaged[damage]).problems


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_operation_refuses_and_changes_nothing(base, damaged, tmp_path, damage, op):
    store = _copy(damaged[damage], tmp_path)
    before = tree_digest(store)
    with pytest.raises(CorruptStore) as e:
        OPS[op](store, tmp_path, base[0])
    assert "rocketlake verify" in str(e.value)
    assert tree_digest(store) == before
    assert not os.path.exists(tmp_path / "exported")


@pytest.mark.parametrize("op", sorted(OPS))
def test_operation_works_on_the_sound_store(base, tmp_path, op):
    """The check refuses only damage: each operation runs on the undamaged store."""
    store = _copy(base[1], tmp_path)
    OPS[op](store, tmp_path, base[0]) if op != "adopt" else None
    from storelib.verify.driver import verify_store
    assert verify_store(store).problems == []


def test_command_lines_refuse_with_one_line(damaged, tmp_path):
    """The rocketlake commands on a store with a row's valid_bytes edited: exit 1, one line naming
    the file, nothing changed (run concurrently: each a fresh interpreter)."""
    src = damaged["segment-valid-bytes-10"]
    py = sys.executable
    cmds = {
        "ingest": ["ingest", "--input", SAMPLE],
        "expire": ["expire", "--reserved-hours", "1", "--now", str(NOW)],
        "expire-topic": ["expire", "--topic", "orders", "--reserved-hours", "1", "--now", str(NOW)],
        "export": ["export", "--to", str(tmp_path / "exported")],
        "query-range": ["query", "range", "--begin", "0", "--end", str(NOW)],
        "inspect-segments": ["inspect", "segments"],
        "repair": ["repair", "--apply"],
    }
    stores, procs = {}, {}
    for name, args in cmds.items():
        stores[name] = str(tmp_path / name)
        shutil.copytree(src, stores[name])
        before = tree_digest(stores[name])
        argv = [py, "-m", "storelib.cli.main", args[0], "--store", stores[name], *args[1:]]
        procs[name] = (subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=dict(os.environ, PYTHONPATH=ROOT)), before)
    bad = []
    for name, (p, before) in procs.items():
        out, err = p.communicate(timeout=300)
        lines = [x for x in err.splitlines() if x.strip()]
        if p.returncode != 1 or len(lines) != 1 or "commitlog/00000000000000000000" not in lines[0] \
                or "Traceback" in err:
            bad.append(f"{name}: exit {p.returncode}: {err[-1500:]}")
        elif tree_digest(stores[name]) != before:
            bad.append(f"{name}: changed the store")
    assert not bad, "\n".join(bad)
    assert not os.path.exists(tmp_path / "exported")


# ----------------------------------------------------------------------------- the checks, one by one
def _snap(store: str):
    """The snapshot as the Delta tables give it, to damage by hand (an opened snapshot is
    immutable), and its configuration."""
    snap = manifest.load_snapshot(storage.Store(store))
    return snap, open_snapshot(storage.Store(store), history=True).config


def _named(problems: list, path: str, words: str) -> bool:
    return any(p == path and words in what for p, _, what in problems)


def _row(snap, pick):
    return next(r for r in sorted(snap.files.values(), key=lambda r: r["path"]) if pick(r))


def test_sound_rows_have_no_problem(base):
    snap, cfg = _snap(base[1])
    assert rowcheck.snapshot_problems(snap, cfg) == []
    rowcheck.check_snapshot(snap)


@pytest.mark.parametrize("case", ["segment-missing", "segment-records-beyond-valid", "last-segment-short",
                                  "queue-file-missing", "queue-not-full", "queue-count", "queue-end",
                                  "index-count", "valid-beyond-file", "checkpoint-row", "duplicate"])
def test_each_structural_check(base, case):
    snap, cfg = _snap(base[1])
    segs = snap.of_kind("commitlog")
    q0 = _row(snap, lambda r: r["kind"] == "consumequeue" and r["base_offset"] == 0
              and any(x["path"] != r["path"] and x["topic"] == r["topic"] and x["queue_id"] == r["queue_id"]
                      for x in snap.of_kind("consumequeue")))
    if case == "segment-missing":
        del snap.files[segs[0]["path"]]
        where, words = segs[1]["path"], "min_phy_offset"
    elif case == "segment-records-beyond-valid":
        snap.files[segs[0]["path"]] = dict(segs[0], valid_bytes=1000)
        where, words = segs[0]["path"], "beyond its valid end"
    elif case == "last-segment-short":
        snap.files[segs[-1]["path"]] = dict(segs[-1], valid_bytes=segs[-1]["valid_bytes"] - 8)
        where, words = segs[-1]["path"], "max_phy_offset"
    elif case == "queue-file-missing":
        files = [r for r in snap.of_kind("consumequeue") if (r["topic"], r["queue_id"]) == (q0["topic"], q0["queue_id"])]
        third = dict(files[-1], base_offset=files[-1]["base_offset"] + cfg.cq_file_size,
                     path=files[-1]["path"][:-20] + f"{files[-1]['base_offset'] + 2 * cfg.cq_file_size:020d}")
        third["base_offset"] = int(third["path"][-20:])
        snap.files[third["path"]] = third
        where, words = third["path"], "gap"
    elif case == "queue-not-full":
        snap.files[q0["path"]] = dict(q0, valid_bytes=q0["valid_bytes"] - 20, count=q0["count"] - 1)
        where, words = q0["path"], "is full"
    elif case == "queue-count":
        snap.files[q0["path"]] = dict(q0, count=q0["count"] - 1)
        where, words = q0["path"], "units of its count"
    elif case == "queue-end":
        last = [r for r in snap.of_kind("consumequeue") if (r["topic"], r["queue_id"]) == (q0["topic"], q0["queue_id"])][-1]
        snap.files[last["path"]] = dict(last, valid_bytes=last["valid_bytes"] - 20, count=last["count"] - 1)
        where, words = last["path"], "checkpoint table says"
    elif case == "index-count":
        idx = snap.of_kind("index")[0]
        snap.files[idx["path"]] = dict(idx, valid_bytes=idx["valid_bytes"] - 20)
        where, words = idx["path"], "indexCount"
    elif case == "valid-beyond-file":
        idx = snap.of_kind("index")[-1]
        snap.files[idx["path"]] = dict(idx, file_size=idx["valid_bytes"] - 1)
        where, words = idx["path"], "beyond its file_size"
    elif case == "checkpoint-row":
        del snap.files["checkpoint"]
        where, words = "checkpoint", "no row for the checkpoint"
    else:
        snap.duplicates = [segs[0]["path"]]
        where, words = segs[0]["path"], "two add rows"
    problems = rowcheck.snapshot_problems(snap, cfg)
    assert _named(problems, where, words), problems
    with pytest.raises(CorruptStore):
        rowcheck.check_snapshot(snap, cfg)
