"""jobs/inspect.py verify: passes on rocketlake and RocketMQ stores, names file and offset of damage."""
from __future__ import annotations

import os
import struct

import pyarrow as pa
import pytest

from conftest import GOLDEN
from support.opshelp import copy_store, restore, small_config, write_messages, run
from storelib.compute import kernels
from storelib.table import manifest
from storelib.verify import driver as verify
from storelib.format.config import load_config
from storelib.format import paths


@pytest.fixture(scope="module")
def rl_store(spark, tmp_path_factory):
    """A rocketlake store of 700 golden messages (small-roll shapes: 65536-byte segments)."""
    from storelib.ingest.driver import run_ingest
    d = tmp_path_factory.mktemp("rl")
    src = os.path.join(GOLDEN, "small-roll", "messages.jsonl")
    store = str(d / "store")
    cfg = small_config()
    run_ingest(spark, store, write_messages(src, str(d / "a.jsonl"), 0, 700), "jsonl", cfg, target_splits=2,
               quiet=True)
    return store


@pytest.fixture
def damaged(rl_store, tmp_path):
    return copy_store(rl_store, str(tmp_path / "copy"))


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x5A]))


def _lines(rep, prefix):
    return [p for p in rep.problems if p.startswith(prefix)]


def test_rocketlake_store_verifies(rl_store, spark):
    rep = verify.verify_store(rl_store, deep=True, spark=spark)       # distributed: Spark tasks
    assert rep.problems == []
    assert rep.manifest and rep.deep
    kinds = {f["kind"] for f in rep.facts}
    assert kinds == {"commitlog", "consumequeue", "index"}
    assert verify.verify_store(rl_store).ok                           # structural, in process


@pytest.mark.parametrize("name,overrides", [
    ("small-roll", {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64,
                    "maxIndexNum": 256}),
    ("default-size", {}),
])
def test_golden_rocketmq_stores_verify(tmp_path, name, overrides):
    store = restore(name, "files.json", str(tmp_path / name))
    rep = verify.verify_store(store, load_config(None, overrides), deep=True)
    assert rep.problems == [], rep.problems[:5]
    assert not rep.manifest
    assert rep.files == {"small-roll": 230, "default-size": 115}[name]


def _record_with_body(store, rel):
    import numpy as np
    buf = np.fromfile(os.path.join(store, rel), dtype=np.uint8)
    starts, _, _ = kernels.walk_records(buf, 0, len(buf))
    for s in starts:
        s = int(s)
        sysflag = struct.unpack_from(">i", buf, s + 36)[0]
        B = 20 if sysflag & 0x10 else 8
        S = 20 if sysflag & 0x20 else 8
        blen = struct.unpack_from(">i", buf, s + 68 + B + S)[0]
        if blen > 4:
            return s, s + 72 + B + S + blen // 2
    raise AssertionError("no record with a body")


def test_flipped_commitlog_body_byte(damaged):
    rel = "commitlog/00000000000000065536"
    rec, at = _record_with_body(damaged, rel)
    _flip(os.path.join(damaged, rel), at)
    shallow = verify.verify_store(damaged)
    assert _lines(shallow, f"{rel}@0: sha256 of bytes [0, ")
    deep = verify.verify_store(damaged, deep=True)
    assert any(p.startswith(f"{rel}@{rec}: BODYCRC") for p in deep.problems), deep.problems


def test_flipped_commitlog_header_byte(damaged):
    rel = "commitlog/00000000000000131072"
    rec, _ = _record_with_body(damaged, rel)
    _flip(os.path.join(damaged, rel), rec + 35)              # low byte of PHYSICALOFFSET
    rep = verify.verify_store(damaged)
    assert any(p.startswith(f"{rel}@{rec}: PHYSICALOFFSET") for p in rep.problems), rep.problems


def test_flipped_consumequeue_byte(damaged):
    snap = manifest.load_snapshot(manifest.storage.Store(damaged))
    row = max(snap.of_kind("consumequeue"), key=lambda r: r["count"])
    _flip(os.path.join(damaged, row["path"]), 2 * 20 + 6)   # unit 2, commitlog offset
    rep = verify.verify_store(damaged, deep=True)
    assert any(p.startswith(f"{row['path']}@40: ") for p in rep.problems), rep.problems
    assert _lines(rep, f"{row['path']}@0: sha256")


def test_flipped_index_byte(damaged):
    cfg = small_config()
    snap = manifest.load_snapshot(manifest.storage.Store(damaged))
    row = next(r for r in snap.of_kind("index") if r["count"] > 10)
    at = 40 + cfg.maxHashSlotNum * 4 + 3 * 20 + 3          # entry 3, low byte of keyHash
    _flip(os.path.join(damaged, row["path"]), at)
    rep = verify.verify_store(damaged)
    assert any(p.startswith(f"{row['path']}@{at - 3}: entry 3: keyHash") for p in rep.problems), rep.problems
    deep = verify.verify_store(damaged, deep=True)
    assert any(p.startswith(f"{row['path']}@{at - 3}: entry 3 -> commitlog") for p in deep.problems), deep.problems


def test_flipped_checkpoint_byte(damaged):
    _flip(os.path.join(damaged, "checkpoint"), 7)
    rep = verify.verify_store(damaged)
    assert any(p.startswith("checkpoint@0: physic_msg_timestamp") for p in rep.problems), rep.problems


def test_truncated_missing_extra_files(damaged):
    seg = os.path.join(damaged, "commitlog/00000000000000065536")
    with open(seg, "r+b") as fh:
        fh.truncate(30000)
    snap = manifest.load_snapshot(manifest.storage.Store(damaged))
    idx = snap.of_kind("index")[0]["path"]
    os.remove(os.path.join(damaged, idx))
    os.makedirs(os.path.join(damaged, "consumequeue/ghost/0"))
    with open(os.path.join(damaged, "consumequeue/ghost/0/00000000000000000000"), "wb") as fh:
        fh.write(b"\0" * 600)
    rep = verify.verify_store(damaged)
    assert "commitlog/00000000000000065536@30000: file size 30000, expected 65536 (truncated or grown)" in rep.problems
    assert any(p.startswith("commitlog/00000000000000065536@") and "before the BLANK" in p for p in rep.problems)
    assert f"{idx}@0: missing file" in rep.problems
    assert any(p.startswith("consumequeue/ghost/0/00000000000000000000@0: extra file") for p in rep.problems)


def test_manifest_row_pointing_at_nothing(damaged):
    from deltalake import write_deltalake
    st = manifest.storage.Store(damaged)
    snap = manifest.load_snapshot(st)
    ghost = dict(next(iter(snap.of_kind("commitlog"))))
    ghost.update(path="commitlog/00000000000009999999", base_offset=9999999)
    write_deltalake(st.path(paths.MANIFEST_DIR), pa.Table.from_pylist([ghost], schema=manifest.MANIFEST_SCHEMA),
                    mode="append")
    rep = verify.verify_store(damaged)
    assert "commitlog/00000000000009999999@0: missing file" in rep.problems
    assert any(p.startswith("commitlog/00000000000009999999@0: gap") or "multiple" in p for p in rep.problems)


def test_verify_cli_plain_python_exit_status(damaged):
    ok = run("inspect.py", "--store", damaged, "verify", "--no-spark")
    assert ok.returncode == 0, ok.stderr
    assert "status=ok" in ok.stderr
    _flip(os.path.join(damaged, "checkpoint"), 15)
    bad = run("inspect.py", "--store", damaged, "verify", "--no-spark")
    assert bad.returncode == 1
    lines = bad.stdout.splitlines()
    assert lines[0] == "checkpoint@0: sha256 differs from the manifest"
    assert lines[1].startswith("checkpoint@8: logics_msg_timestamp ") and len(lines) == 2
    assert "status=FAILED problems=2" in bad.stderr
