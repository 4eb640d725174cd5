"""``verify --deep`` of a directory without a manifest finds at least what repair's dry run finds
(issue 36 item 2): every missing, truncated or differing queue and index file, by the same
derivation from the CommitLog (``storelib.ops.deepverify`` over ``ops.repair.plan_repair``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from storelib.ops import deepverify
from storelib.ops.repair import repair
from storelib.table.export import export_store

from test_ops_check import base  # noqa: F401 - the two-batch demo store


@pytest.fixture(scope="module")
def exported(base):  # noqa: F811
    tmp, store = base
    out = str(tmp / "exported-for-verify")
    export_store(store, out)
    return out


def _remove_index(d):
    for f in os.listdir(os.path.join(d, "index")):
        os.remove(os.path.join(d, "index", f))


def _all_queue_files(d) -> list:
    out = []
    for dp, _, fs in os.walk(os.path.join(d, "consumequeue")):
        out += [os.path.join(dp, f) for f in fs]
    return sorted(out)


def _queue_file(d, k=0):
    return _all_queue_files(d)[k]


def _truncate_queue(d):
    with open(_queue_file(d, 3), "r+b") as fh:
        fh.truncate(40)


def _queue_files(d) -> dict:
    """queue directory -> its files, in offset order."""
    out: dict = {}
    for f in _all_queue_files(d):
        out.setdefault(os.path.dirname(f), []).append(f)
    return out


def _remove_queue(d):
    """The second file of a queue (an export's queue may start late, never have a hole)."""
    os.remove(next(fs[1] for _, fs in sorted(_queue_files(d).items()) if len(fs) > 1))


def _remove_first_queue_file_of_a_broker_directory(d):
    """A broker's directory (no rocketlake.properties): a queue's first file gone while the
    CommitLog still holds its records is damage."""
    os.remove(os.path.join(d, "rocketlake.properties"))
    os.remove(next(fs[0] for _, fs in sorted(_queue_files(d).items()) if len(fs) > 1))


def _zero_unit(d):
    with open(_queue_file(d, 7), "r+b") as fh:
        fh.seek(20)
        fh.write(bytes(20))


def _slot(d):
    idx = sorted(os.listdir(os.path.join(d, "index")))[1]
    with open(os.path.join(d, "index", idx), "r+b") as fh:
        fh.seek(40 + 4 * 7)
        fh.write(b"\x00\x00\x00\x00")


DAMAGES = {"index-removed": _remove_index, "queue-truncated": _truncate_queue, "queue-removed": _remove_queue,
           "queue-unit-zeroed": _zero_unit, "index-slot-cleared": _slot,
           "broker-first-queue-file-removed": _remove_first_queue_file_of_a_broker_directory}


def test_clean_export_is_clean(exported):
    assert deepverify.verify_store(exported, deep=True).problems == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_deep_verify_finds_what_repair_finds(exported, tmp_path, damage):
    d = str(tmp_path / "dmg")
    shutil.copytree(exported, d)
    DAMAGES[damage](d)
    found = repair(d, quiet=True)["findings"]
    repair_paths = {f["path"] for f in found if f["state"] in ("missing", "truncated", "differing", "extra")
                    and f["kind"] in ("consumequeue", "index")}
    assert repair_paths, "the damage must be one repair's dry run sees"
    rep = deepverify.verify_store(d, deep=True)
    named = {p.split("@", 1)[0] for p in rep.problems}
    assert repair_paths <= named, (repair_paths - named, rep.problems[:8])


def test_command_line_fails_on_a_directory_without_index_files(exported, tmp_path):
    d = str(tmp_path / "dmg")
    shutil.copytree(exported, d)
    _remove_index(d)
    res = subprocess.run([sys.executable, "-m", "storelib.cli.main", "verify", "--store", d, "--deep"], cwd=ROOT,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert res.returncode == 1, res.stderr
    assert "index/" in res.stdout and "missing index file" in res.stdout
