"""What attempts that never committed left behind is cleared by the writer whose commit just went
through (``ingest.commit.clear_dead_attempts``, shared by ingest, expire and repair). The batch is
committed by then, so a storage error there (a racing writer removing its own attempt at the same
moment, an outage) is a warning and the command succeeds; the next writer clears what is left."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import GOLDEN
from support.opshelp import restore, small_config
from storelib.ops import adopt, expire as retention, repair as repair_op
from storelib.table import deltacommit, manifest
from storelib.io import storage
from storelib.verify import driver as verify


def _clearing_fails(monkeypatch) -> list:
    """The last step of the clear-up raises as pyarrow does for a prefix emptied meanwhile."""
    calls = []

    def clear_scratch(store):
        calls.append(store.root)
        raise FileNotFoundError("Path does not exist '_rocketlake/_scratch'")

    monkeypatch.setattr(deltacommit, "clear_scratch", clear_scratch)
    return calls


@pytest.fixture
def adopted(tmp_path):
    store = restore("expire-small", "files_before.json", str(tmp_path / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    return store


def test_expire_commits_and_warns_when_clearing_dead_attempts_fails(adopted, monkeypatch, capsys):
    calls = _clearing_fails(monkeypatch)
    now = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]
    s = retention.expire(adopted, 48, now_ms=now, quiet=True)
    assert calls and s["status"] == "committed"
    assert "kept for the next writer to clear" in capsys.readouterr().err
    assert manifest.load_snapshot(storage.Store(adopted)).batch["operation"] == "expire"
    assert verify.verify_store(adopted).problems == []


def test_repair_commits_and_warns_when_clearing_dead_attempts_fails(adopted, monkeypatch, capsys):
    cq_dir = os.path.join(adopted, "consumequeue")
    topic = sorted(os.listdir(cq_dir))[0]
    shutil.rmtree(os.path.join(cq_dir, topic))           # damage repair derives again
    calls = _clearing_fails(monkeypatch)
    s = repair_op.repair(adopted, apply=True, quiet=True)
    assert calls and s["batch_seq"] == 2
    assert "kept for the next writer to clear" in capsys.readouterr().err
    assert manifest.load_snapshot(storage.Store(adopted)).batch["operation"] == "repair"
    assert verify.verify_store(adopted).problems == []
