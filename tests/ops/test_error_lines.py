"""Bad values and odd store contents get one clear line, the right exit status, and leave the
store as it was (issue 35 item 7): retention hours that are not finite or out of range, a bad
topicRetention map, an integer RocketMQ cannot take, a lease file no writer wrote, a lease path
that is a directory, a truncated Delta log under expire, an export's hand-edited properties.

The commands run in this process (``rocketlake``'s ``main``), each on its own copy of the store."""
from __future__ import annotations

import os
import shutil
import signal

import pytest

from storelib.table.export import export_store

from test_ops_check import NOW, base, tree_digest  # noqa: F401 - the two-batch demo store


@pytest.fixture
def cli(capsys):
    """run(argv) -> (exit status, stderr lines) of ``rocketlake ARGV`` in this process."""
    env = dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def run(argv):
        from storelib.cli.main import main
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as e:             # argparse
            code = e.code
        err = capsys.readouterr().err
        return code, [x for x in err.splitlines() if x.strip()]
    yield run
    os.environ.clear()
    os.environ.update(env)
    for s, h in handlers.items():
        signal.signal(s, h)


@pytest.fixture
def store(base, tmp_path):  # noqa: F811
    return shutil.copytree(base[1], str(tmp_path / "store"))


def _one_line(code, lines, want_code, *words):
    """One error line (argparse's usage lines before it aside)."""
    assert code == want_code, lines
    if lines and lines[0].startswith("usage:"):
        lines = [x for x in lines if not x.startswith(("usage:", " "))]
    assert len(lines) == 1, lines
    assert all(w in lines[0] for w in words), lines
    assert "Traceback" not in lines[0]


@pytest.mark.parametrize("hours", ["nan", "inf", "1e308", "-1"])
@pytest.mark.parametrize("form", ["store-wide", "topic"])
def test_retention_hours_must_be_finite(cli, store, hours, form):
    before = tree_digest(store)
    args = ["--reserved-hours", hours] if form == "store-wide" else ["--topic", "orders", "--reserved-hours", hours]
    code, lines = cli(["expire", "--store", store, *args, "--now", str(NOW)])
    _one_line(code, lines, 2, "--reserved-hours", hours)
    assert tree_digest(store) == before


@pytest.mark.parametrize("rule", ["orders=nan", "orders=inf", "orders=1e308", "orders", "orders=", "=5"])
def test_topic_retention_entries(cli, store, tmp_path, rule):
    props = tmp_path / "ret.properties"
    props.write_text(f"topicRetention={rule}\n")
    before = tree_digest(store)
    code, lines = cli(["expire", "--store", store, "--config", str(props), "--reserved-hours", "1", "--now",
                       str(NOW)])
    _one_line(code, lines, 2, "topicRetention", repr(rule))
    assert tree_digest(store) == before


@pytest.mark.parametrize("key", ["mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxIndexNum"])
def test_integers_rocketmq_cannot_take(cli, base, tmp_path, key):  # noqa: F811
    props = tmp_path / "big.properties"
    props.write_text(f"{key}=99999999999999999999\n")
    target = str(tmp_path / "new")
    code, lines = cli(["ingest", "--store", target, "--input", str(base[0] / "c.jsonl"), "--config", str(props)])
    _one_line(code, lines, 2, str(props), key)
    assert not os.path.exists(os.path.join(target, "_rocketlake"))


def test_lease_with_wrong_types(cli, store):
    lease = os.path.join(store, "_rocketlake", "writer.lock")
    with open(lease, "w") as fh:
        fh.write('{"batch_id": "b", "host": "h", "pid": 1, "token": "t", "started_ms": 1, "renewed_ms": "soon"}\n')
    before = tree_digest(store)
    for argv in (["expire", "--store", store, "--reserved-hours", "1", "--now", str(NOW)],
                 ["repair", "--store", store, "--apply"]):
        code, lines = cli(argv)
        _one_line(code, lines, 1, "_rocketlake/writer.lock", "renewed_ms", "remove it")
    assert tree_digest(store) == before


def test_lease_path_that_is_a_directory(cli, store):
    os.mkdir(os.path.join(store, "_rocketlake", "writer.lock"))
    before = tree_digest(store)
    code, lines = cli(["expire", "--store", store, "--reserved-hours", "1", "--now", str(NOW)])
    _one_line(code, lines, 1, "_rocketlake/writer.lock", "directory")
    assert not [f for f in os.listdir(os.path.join(store, "_rocketlake")) if ".stale-" in f]
    assert os.path.isdir(os.path.join(store, "_rocketlake", "writer.lock"))
    assert tree_digest(store) == before


@pytest.mark.parametrize("table", ["checkpoints", "manifest"])
def test_expire_on_a_truncated_delta_log(cli, store, table):
    log = os.path.join(store, "_rocketlake", table, "_delta_log")
    last = sorted(f for f in os.listdir(log) if f.endswith(".json"))[-1]
    with open(os.path.join(log, last), "r+b") as fh:
        fh.truncate(50)
    before = tree_digest(store)
    code, lines = cli(["expire", "--store", store, "--reserved-hours", "1", "--now", str(NOW)])
    _one_line(code, lines, 1, f"_rocketlake/{table}/_delta_log/{last}")
    assert tree_digest(store) == before


def test_edited_properties_of_an_export(cli, base, tmp_path):  # noqa: F811
    out = str(tmp_path / "exported")
    export_store(base[1], out)
    props = os.path.join(out, "rocketlake.properties")
    with open(props) as fh:
        text = fh.read()
    with open(props, "w") as fh:
        fh.write(text.replace("mappedFileSizeCommitLog=65536", "mappedFileSizeCommitLog=131072"))
    for argv in (["verify", "--store", out], ["query", "range", "--store", out, "--begin", "0", "--end", str(NOW)]):
        code, lines = cli(argv)
        _one_line(code, lines, 2, props, "mappedFileSizeCommitLog=131072", "65536")


@pytest.mark.parametrize("command", ["ingest", "verify", "query"])
def test_topic_retention_is_checked_by_every_command(cli, base, store, tmp_path, command):  # noqa: F811
    """``topicRetention=orders`` (no hours) in a --config is an error wherever the file is read,
    not only under expire."""
    props = tmp_path / "ret.properties"
    props.write_text("topicRetention=orders\n")
    argv = {"ingest": ["ingest", "--store", store, "--input", str(base[0] / "c.jsonl")],
            "verify": ["verify", "--store", store],
            "query": ["query", "range", "--store", store, "--begin", "0", "--end", str(NOW)]}[command]
    before = tree_digest(store)
    code, lines = cli(argv + ["--config", str(props)])
    _one_line(code, lines, 2, str(props), "topicRetention entry 'orders'")
    assert tree_digest(store) == before
