"""Durable commits, proven with the system calls a real ingest makes (strace).

One traced process runs two ingests of the small-roll messages in one Spark session: a store with
the default ``flushDiskType`` (SYNC_FLUSH) and one with ASYNC_FLUSH. From the trace:

* SYNC_FLUSH: every file of the batch (each manifest row's staged file: commitlog segments,
  consume-queue files, index files, the checkpoint file) and every directory on the way to one
  of them, up to the store root, is fsync'd, and the fsync has returned, before the ``linkat``
  that creates the checkpoints table's commit file (the switch that makes the batch visible).
  Each table's first commit file is fsync'd before its new table directory is renamed into
  place, and the directory holding it after. After the publishing renames, the directories of every final name are fsync'd.
* ASYNC_FLUSH: no file of the store is fsync'd.
* a second batch into a SYNC_FLUSH store continues its files in place (storelib.io.patches): each
  continued file gets its patch written (pwrite64) only after the switch of that batch (nothing
  of a store file changes before it), and fsync'd; an index file's slot heads and header (phase
  1) are written only after an fsync that followed its new entries (phase 0).
All stores are byte-identical to RocketMQ's.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, golden_set
from support.goldenlib import compare

from storelib.table import manifest
from storelib.io import storage
from storelib.format import paths

PY = sys.executable
LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*?)(?:\s+<(\d+\.\d+)>)?$")
CALL = re.compile(r"^(\w+)\((.*)$")


def _properties(set_dir: str, path, flush: str) -> str:
    cfg = json.load(open(os.path.join(set_dir, "config.json")))["messageStoreConfig"]
    cfg = {k: v for k, v in cfg.items() if k != "flushDiskType"}
    if flush:
        cfg["flushDiskType"] = flush
    path.write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    return str(path)


def parse_trace(text: str) -> list[dict]:
    """strace -f -y -ttt -T lines -> [{pid, call, args, start, end}] with unfinished/resumed joined."""
    out, pending = [], {}
    for raw in text.splitlines():
        m = LINE.match(raw)
        if not m:
            continue
        pid, ts, rest, dur = m.group(1), float(m.group(2)), m.group(3), m.group(4)
        if rest.startswith("---") or rest.startswith("+++"):
            continue
        if rest.startswith("<..."):
            ev = pending.pop(pid, None)
            if ev is not None:
                ev["end"] = ts
                ev["ok"] = rest.rstrip().endswith("= 0")
                out.append(ev)
            continue
        c = CALL.match(rest)
        if not c:
            continue
        ev = {"pid": pid, "call": c.group(1), "args": c.group(2), "start": ts,
              "end": ts + float(dur) if dur else ts, "ok": rest.rstrip().endswith("= 0")}
        if rest.endswith("<unfinished ...>"):
            ev["args"] = ev["args"][:-len("<unfinished ...>")].rstrip()
            pending[pid] = ev
        else:
            out.append(ev)
    return out


def fsynced_paths(events) -> dict:
    """path -> earliest completion time of a successful fsync/fdatasync of it."""
    done = {}
    for e in events:
        if e["call"] in ("fsync", "fdatasync") and e["ok"]:
            m = re.match(r"\d+<(.*)>", e["args"])
            if m:
                done.setdefault(m.group(1), e["end"])
                done[m.group(1)] = min(done[m.group(1)], e["end"])
    return done


def _commit_time(events, table_dir: str, version: int = 0) -> float:
    """When the table's commit file of ``version`` appeared: linked into its log, or (version 0)
    with the whole new table directory renamed into place (storelib.table.deltacommit)."""
    target = os.path.join(table_dir, "_delta_log", f"{version:020d}.json")
    for e in events:
        if e["call"] not in ("linkat", "link", "rename", "renameat", "renameat2"):
            continue
        names = re.findall(r'"([^"]*)"', e["args"])
        if names and (names[-1] == target or (version == 0 and names[-1] == table_dir)):
            return e["start"]
    raise AssertionError(f"no commit of {target} in the trace")


@pytest.mark.slow
def test_batch_is_on_stable_storage_before_its_commit(tmp_path):
    if shutil.which("strace") is None:
        pytest.fail("strace is required for this test (apt-get install strace)")
    g = golden_set("small-roll")
    stores = {flush: str(tmp_path / f"store-{flush.lower()}") for flush in ("SYNC_FLUSH", "ASYNC_FLUSH")}
    jobs = [{"store": stores["SYNC_FLUSH"], "input": os.path.join(g, "messages.jsonl"),
             "config": _properties(g, tmp_path / "sync.properties", ""), "partitions": 3, "quiet": True},
            {"store": stores["ASYNC_FLUSH"], "input": os.path.join(g, "messages.jsonl"),
             "config": _properties(g, tmp_path / "async.properties", "ASYNC_FLUSH"), "partitions": 3,
             "quiet": True}]
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    stores["patched"] = str(tmp_path / "store-patched")
    for k, (lo, hi) in enumerate(((0, 1700), (1700, len(lines)))):
        part = tmp_path / f"part{k}.jsonl"
        part.write_text("".join(lines[lo:hi]), encoding="utf-8")
        jobs.append({"store": stores["patched"], "input": str(part), "batch_id": f"p{k}",
                     "config": _properties(g, tmp_path / "patched.properties", ""), "partitions": 3, "quiet": True})
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps({"master": "local[2]", "jobs": jobs}))
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    r = subprocess.run(["strace", "-f", "--seccomp-bpf", "-qq", "-y", "-ttt", "-T", "-o", str(trace),
                        "-e", "trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat,pwrite64",
                        PY, os.path.join(ROOT, "tests", "support", "ingest_runner.py"), str(spec)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    events = parse_trace(trace.read_text())
    synced = fsynced_paths(events)

    # -- SYNC_FLUSH: everything of the batch fsync'd before the switch
    store = storage.Store(stores["SYNC_FLUSH"])
    root = store.root
    switch = _commit_time(events, store.path(paths.CHECKPOINTS_DIR))
    rows = list(manifest.load_snapshot(store).files.values())
    kinds = {r["kind"] for r in rows}
    assert kinds == {"commitlog", "consumequeue", "index", "checkpoint"}, kinds
    late, missing = [], []
    for r in rows:
        staged = store.path(r["staged_path"])
        chain = [staged]
        while chain[-1] != root:
            chain.append(os.path.dirname(chain[-1]))      # every directory up to the store root
        for p in chain:
            if p not in synced:
                missing.append(p)
            elif synced[p] >= switch:
                late.append(p)
    assert not missing, f"{len(missing)} file(s)/dir(s) of the batch never fsync'd, e.g. {missing[:3]}"
    assert not late, f"{len(late)} fsync(s) finished after the commit, e.g. {late[:3]}"
    for table in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):
        linked = _commit_time(events, store.path(table))
        entry = [t for p, t in synced_all(events) if p.endswith("/_delta_log/00000000000000000000.json")
                 and "/_rocketlake/tmp/" in p and t < linked]
        assert entry, f"{table}: its commit file was not fsync'd before it was linked into the log"
        parent = os.path.dirname(store.path(table))       # version 0: the table directory renamed in
        assert any(p == parent and t > linked for p, t in synced_all(events)), f"{parent} not fsync'd after the rename"
        if table == paths.MANIFEST_DIR:
            assert linked < switch
    # publish: each final name's directory is fsync'd after the rename that created the name
    renamed = {}
    for e in events:
        if e["call"] in ("rename", "renameat", "renameat2"):
            names = re.findall(r'"([^"]*)"', e["args"])
            if len(names) == 2 and names[1].startswith(root + "/") and "/_rocketlake/" not in names[1]:
                renamed[names[1]] = e["end"]
    finals = {store.path(r["path"]) for r in rows}
    assert finals <= set(renamed), f"not published by rename: {sorted(finals - set(renamed))[:3]}"
    dir_syncs = [(e["end"], re.match(r"\d+<(.*)>", e["args"]).group(1)) for e in events
                 if e["call"] == "fsync" and e["ok"] and re.match(r"\d+<(.*)>", e["args"])]
    for f in finals:
        d = os.path.dirname(f)
        assert any(p == d and t > renamed[f] for t, p in dir_syncs), f"{d} not fsync'd after publishing {f}"
    assert compare(g, stores["SYNC_FLUSH"]) == []

    # -- ASYNC_FLUSH: no fsync of any store file
    aroot = storage.Store(stores["ASYNC_FLUSH"]).root
    touched = [p for p in synced if p.startswith(aroot + "/") and not p.endswith("writer.lock")]
    assert touched == [], f"ASYNC_FLUSH store fsync'd {touched[:5]}"
    assert compare(g, stores["ASYNC_FLUSH"]) == []
    check_patches(events, storage.Store(stores["patched"]))
    assert compare(g, stores["patched"]) == []


def synced_all(events) -> list:
    """(path, end time) of every successful fsync/fdatasync, in trace order."""
    out = []
    for e in events:
        m = re.match(r"\d+<(.*)>", e["args"])
        if e["call"] in ("fsync", "fdatasync") and e["ok"] and m:
            out.append((m.group(1), e["end"]))
    return out


def check_patches(events, store) -> None:
    """The second batch's in-place patches: written only after its switch, and fsync'd; an index
    file's slot heads and header only after its entries were fsync'd."""
    switch = _commit_time(events, store.path(paths.CHECKPOINTS_DIR), version=1)
    rows = [r for r in manifest.load_snapshot(store).files.values() if r["batch_id"] == "p1" and not r["staged_path"]]
    assert {r["kind"] for r in rows} >= {"commitlog", "consumequeue", "index"}, rows
    for r in rows:
        path = store.path(r["path"])
        writes = [e for e in events if e["call"] == "pwrite64" and re.match(r"\d+<" + re.escape(path) + ">", e["args"])]
        assert writes, f"{r['path']}: no write in place"
        syncs = sorted(e["end"] for e in events if e["call"] in ("fsync", "fdatasync") and e["ok"]
                       and re.match(r"\d+<" + re.escape(path) + ">", e["args"]))
        assert min(w["start"] for w in writes) > switch, f"{r['path']}: written in place before the switch"
        last = max(w["end"] for w in writes)
        assert any(last < t for t in syncs), f"{r['path']}: patch not fsync'd"
        if r["kind"] == "index":
            def offset(w):
                return int(re.findall(r",\s*(\d+)\)", w["args"])[-1])     # pwrite64(fd, buf, count, offset)
            entries_at = max(offset(w) for w in writes)          # the new entries follow the slot table
            entry_writes = [w for w in writes if offset(w) == entries_at]
            link_writes = [w for w in writes if offset(w) < entries_at]
            assert link_writes, "no slot head or header written"
            done = max(w["end"] for w in entry_writes)
            first_link = min(w["start"] for w in link_writes)
            assert any(done < t < first_link for t in syncs), "slot heads written before the entries were durable"


def test_parse_trace_joins_unfinished_calls():
    text = ("11 100.000 fsync(9</s/a> <unfinished ...>\n"
            "12 100.100 fsync(7</s/b>) = 0 <0.001>\n"
            "11 100.500 <... fsync resumed>) = 0 <0.5>\n"
            "12 101.000 linkat(AT_FDCWD</w>, \"/t/x#1\", AT_FDCWD</w>, \"/t/x\", 0) = 0 <0.0001>\n")
    ev = parse_trace(text)
    synced = fsynced_paths(ev)
    assert synced == {"/s/a": 100.5, "/s/b": 100.101}
    assert [e["call"] for e in ev] == ["fsync", "fsync", "linkat"]


def test_flush_disk_type_is_validated():
    from storelib.format.config import load_config
    from storelib.errors import ConfigError
    assert load_config().durable
    assert not load_config(overrides={"flushDiskType": "ASYNC_FLUSH"}).durable
    with pytest.raises(ConfigError, match="flushDiskType"):
        load_config(overrides={"flushDiskType": "sometimes"})
