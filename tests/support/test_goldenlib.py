"""tests/support/goldenlib.py itself: restore() rebuilds exactly what files.json lists, compare() catches
every kind of difference (and ignores what is not part of the store format), the command line
exits 0/1, and the bundled archives unpack to the layout the tests read."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from support import goldenlib
from conftest import golden_set

SET = "small-roll"
CLI = [sys.executable, goldenlib.__file__]


def listing(set_dir: str, name: str = "files.json") -> dict:
    return {f["path"]: f for f in json.load(open(os.path.join(set_dir, name)))["files"]}


def sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


@pytest.fixture
def store(tmp_path):
    return goldenlib.restore(golden_set(SET), str(tmp_path / "store"))


def test_restore_matches_files_json(store):
    files = listing(golden_set(SET))
    on_disk = {os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(store) for f in fs}
    assert on_disk == set(files)
    for path, f in files.items():
        full = os.path.join(store, path)
        assert os.path.getsize(full) == f["size"], path
        assert sha256(full) == f["sha256"], path
    assert goldenlib.compare(golden_set(SET), store) == []


def test_every_listing_is_its_stored_bytes():
    """compare() trusts a set's stored bytes (and zero tails): each is the file its listing's
    size and sha256 describe, in every set and listing."""
    root = goldenlib.golden_root()
    for name in goldenlib.SETS:
        listings = sorted(n for n in os.listdir(os.path.join(root, name)) if n.startswith("files") and n.endswith(".json"))
        assert listings, name
        for ln in listings:
            base, files = goldenlib.load_listing(os.path.join(root, name), ln)
            for f in files:
                h = hashlib.sha256()
                for block in goldenlib.golden_blocks(os.path.join(base, f["stored_as"]), f["size"]):
                    h.update(block)
                assert h.hexdigest() == f["sha256"], (name, ln, f["path"])
                assert goldenlib._golden_digest(os.path.join(base, f["stored_as"]), f["size"]) is not None, f


def test_flipped_byte(store):
    flip(os.path.join(store, "commitlog/00000000000000065536"), 1234)
    assert goldenlib.compare(golden_set(SET), store) == [
        "differs: commitlog/00000000000000065536: content differs; first difference at byte 1234"]


def test_flipped_byte_in_an_index_file_and_the_checkpoint(store):
    first_index = sorted(os.listdir(os.path.join(store, "index")))[0]
    flip(os.path.join(store, "index", first_index), 4000)
    flip(os.path.join(store, "checkpoint"), 3)
    assert goldenlib.compare(golden_set(SET), store) == [
        "differs: checkpoint: content differs; first difference at byte 3",
        f"differs: index/{first_index}: content differs; first difference at byte 4000"]


def test_truncated_file(store):
    path = "consumequeue/refund/3/00000000000000000000"
    os.truncate(os.path.join(store, path), 100)
    assert goldenlib.compare(golden_set(SET), store) == [
        f"differs: {path}: size 100, golden 600; first difference at byte 100"]


def test_longer_file(store):
    path = "consumequeue/refund/3/00000000000000000000"
    os.truncate(os.path.join(store, path), 700)
    assert goldenlib.compare(golden_set(SET), store) == [
        f"differs: {path}: size 700, golden 600; first difference at byte 600"]


def test_missing_file(store):
    os.remove(os.path.join(store, "commitlog/00000000000000000000"))
    assert goldenlib.compare(golden_set(SET), store) == ["missing: commitlog/00000000000000000000"]


def test_missing_checkpoint(store):
    os.remove(os.path.join(store, "checkpoint"))
    assert goldenlib.compare(golden_set(SET), store) == ["missing: checkpoint"]


def test_extra_file(store):
    extra = os.path.join(store, "consumequeue", "refund", "3", "00000000000000000600")
    with open(extra, "wb") as fh:
        fh.write(bytes(600))
    assert goldenlib.compare(golden_set(SET), store) == ["extra: consumequeue/refund/3/00000000000000000600"]


def test_extra_index_file(store):
    with open(os.path.join(store, "index", "29991231235959999"), "wb") as fh:
        fh.write(b"x")
    assert goldenlib.compare(golden_set(SET), store) == ["extra: index/29991231235959999"]


def test_index_files_are_matched_in_name_order(store):
    """Index file names are wall-clock times: other names in the same order are still golden."""
    idx = os.path.join(store, "index")
    for i, name in enumerate(sorted(os.listdir(idx))):
        os.rename(os.path.join(idx, name), os.path.join(idx, f"2024010112{i:02d}00000"))
    assert goldenlib.compare(golden_set(SET), store) == []
    os.remove(os.path.join(idx, max(os.listdir(idx))))
    last_golden = max(p for p in listing(golden_set(SET)) if p.startswith("index/"))
    assert goldenlib.compare(golden_set(SET), store) == [f"missing: {last_golden}"]


def test_ignores_runtime_leftovers_and_rocketlake_metadata(store):
    os.remove(os.path.join(store, "lock"))
    os.remove(os.path.join(store, "abort.bak"))
    shutil.rmtree(os.path.join(store, "compaction"))
    os.makedirs(os.path.join(store, "_rocketlake", "manifest", "_delta_log"))
    with open(os.path.join(store, "_rocketlake", "manifest", "_delta_log", "0.json"), "w") as fh:
        fh.write("{}")
    with open(os.path.join(store, "abort"), "w") as fh:
        fh.write("")
    assert goldenlib.compare(golden_set(SET), store) == []


def test_restore_rejects_a_corrupt_golden_set(tmp_path):
    src = golden_set(SET)
    bad = tmp_path / "set"
    shutil.copytree(os.path.join(src, "store"), bad / "store")
    shutil.copy(os.path.join(src, "files.json"), bad / "files.json")
    os.chmod(bad / "store" / "checkpoint", 0o644)
    flip(str(bad / "store" / "checkpoint"), 0)
    with pytest.raises(goldenlib.GoldenError, match="sha256 mismatch after restore: checkpoint"):
        goldenlib.restore(str(bad), str(tmp_path / "out"))
    goldenlib.restore(str(bad), str(tmp_path / "out2"), verify=False)      # opshelp's fast path


def test_sparse_gzipped_heads(tmp_path):
    """The default-size layout (`.head.gz` + size): zero tails restore sparse, differences in the
    tail are found at their offset."""
    head = b"\x01\x02\x03" * 1000
    full = head + bytes((5 << 20) - len(head))
    sdir = tmp_path / "set" / "store" / "commitlog"
    sdir.mkdir(parents=True)
    (sdir / "00000000000000000000.head.gz").write_bytes(gzip.compress(head))
    meta = {"store_root": "store", "head_gz": True,
            "files": [{"path": "commitlog/00000000000000000000", "size": len(full),
                       "sha256": hashlib.sha256(full).hexdigest(), "last_nonzero_end": len(head),
                       "stored_as": "commitlog/00000000000000000000.head.gz"}]}
    (tmp_path / "set" / "files.json").write_text(json.dumps(meta))
    out = goldenlib.restore(str(tmp_path / "set"), str(tmp_path / "out"))
    seg = os.path.join(out, "commitlog", "00000000000000000000")
    assert open(seg, "rb").read() == full
    assert os.stat(seg).st_blocks * 512 < len(full)                  # the zero tail is a hole
    assert goldenlib.compare(str(tmp_path / "set"), out) == []
    flip(seg, (4 << 20) + 17)                                        # second 4 MiB block, in the tail
    assert goldenlib.compare(str(tmp_path / "set"), out) == [
        f"differs: commitlog/00000000000000000000: content differs; first difference at byte {(4 << 20) + 17}"]


def test_command_line(tmp_path):
    g = golden_set(SET)
    r = subprocess.run([*CLI, "restore", g, str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*CLI, "cmp", g, str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "identical", r.stdout + r.stderr
    os.remove(os.path.join(tmp_path / "s", "commitlog", "00000000000000000000"))
    r = subprocess.run([*CLI, "cmp", g, str(tmp_path / "s")], capture_output=True, text=True)
    assert r.returncode == 1 and "missing: commitlog/00000000000000000000" in r.stdout
    r = subprocess.run([*CLI, "cmp", g], capture_output=True, text=True)
    assert r.returncode == 2


def test_pack_and_unpack_round_trip(tmp_path):
    src = tmp_path / "golden" / "tiny"
    (src / "store" / "commitlog").mkdir(parents=True)
    (src / "messages.jsonl").write_text('{"topic": "t"}\n')
    (src / "store" / "commitlog" / "00000000000000000000").write_bytes(b"abc")
    sizes = goldenlib.pack(str(tmp_path / "golden"), str(tmp_path / "arch"), ["tiny"])
    assert list(sizes) == [str(tmp_path / "arch" / "tiny.tar.xz")]
    again = goldenlib.pack(str(tmp_path / "golden"), str(tmp_path / "arch2"), ["tiny"])
    assert open(list(sizes)[0], "rb").read() == open(list(again)[0], "rb").read()    # reproducible
    root = goldenlib.unpack_archives(str(tmp_path / "arch"), str(tmp_path / "cache"))
    assert open(os.path.join(root, "tiny", "messages.jsonl")).read() == '{"topic": "t"}\n'
    assert open(os.path.join(root, "tiny", "store", "commitlog", "00000000000000000000"), "rb").read() == b"abc"
    assert goldenlib.unpack_archives(str(tmp_path / "arch"), str(tmp_path / "cache")) == root
    assert os.listdir(tmp_path / "cache") == [os.path.basename(root)]


def test_default_root_is_the_bundled_data(monkeypatch):
    """Without ROCKETLAKE_SHARED the suite reads only the repository's own archives."""
    monkeypatch.setenv("ROCKETLAKE_SHARED", "")
    root = goldenlib.golden_root()
    assert os.path.dirname(root) in (goldenlib.CACHE_DIR,
                                     os.path.join(tempfile.gettempdir(), f"rocketlake-golden-{os.getuid()}"))
    for name in goldenlib.SETS:
        for f in ("config.json", "queries.jsonl", "answers.jsonl", "put_results.jsonl"):
            assert os.path.isfile(os.path.join(root, name, f)), (name, f)
    for name in ("small-roll", "default-size"):
        assert os.path.isfile(os.path.join(root, name, "files.json")), name
    assert os.path.isfile(os.path.join(root, "small-roll", "messages.jsonl"))
    assert os.path.isfile(os.path.join(root, "default-size", "messages.jsonl.gz"))
    for f in ("files_before.json", "files_after.json", "deleted.json", "store_after_changed/checkpoint"):
        assert os.path.isfile(os.path.join(root, "expire-small", f)), f


def test_small_roll_config_is_the_sets_own():
    """SMALL_ROLL_CONFIG is the store sizes small-roll's config.json records."""
    with open(os.path.join(goldenlib.golden_root(), "small-roll", "config.json")) as fh:
        written = json.load(fh)["messageStoreConfig"]
    assert goldenlib.SMALL_ROLL_CONFIG == {k: v for k, v in written.items() if k != "flushDiskType"}
