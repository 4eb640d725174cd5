"""A user's second hour (issue 36): a SIGTERM after the commit is no failure, empty bodies are
refused as RocketMQ's producer refuses them, every bad row is reported in the words of the input
schema, the input format is inferred, and the command line behaves as a command line should.

Most commands run in this process through ``storelib.cli.main.main`` (``rl`` of test_first_hour:
small inputs never start a JVM); the signal tests run ``python -m storelib.cli.main`` as a child.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from test_first_hour import DEMO_CONF, SAMPLE, one_line_error, rl


def _line(topic="t", body=b"hello", **extra) -> dict:
    row = {"topic": topic, "queue_id": 0, "store_timestamp": 1717200000000, "born_host": "10.0.0.1:1",
           "store_host": "10.0.0.2:10911", "body_b64": base64.b64encode(body).decode(),
           "properties": [["KEYS", "k"]]}
    row.update(extra)
    return row


def _write_jsonl(path, rows) -> str:
    with open(path, "w") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def _small_store(tmp_path, messages: int = 1) -> str:
    """A store of ``messages`` messages (the demo's small files), ingested by `rocketlake ingest`."""
    store = str(tmp_path / "store")
    code, _out, err = rl("ingest", "--store", store, "--input",
                         _write_jsonl(tmp_path / "in.jsonl", [_line() for _ in range(messages)]),
                         "--config", DEMO_CONF, "--quiet")
    assert code == 0, err
    return store


def _child_env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


# --------------------------------------------------------------------------- item 6: SIGTERM after the commit
@pytest.mark.parametrize("point", ["after-commit-before-publish", "after-publish-before-cleanup"])
def test_sigterm_after_commit_finishes_and_exits_0(tmp_path, point):
    store, gate = str(tmp_path / "store"), str(tmp_path / "gate")
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=bytes([65 + i])) for i in range(20)])
    env = dict(_child_env(), ROCKETLAKE_HOLD=f"{point}:{gate}")
    p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "ingest", "--store", store, "--input", src,
                          "--config", DEMO_CONF, "--quiet"], env=env, cwd=str(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".reached") and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(gate + ".reached"), p.communicate()
        p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert "status=committed" in out and "messages=20" in out
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == ["SIGTERM arrived after the batch was committed: the job finished it first (nothing to rerun)"], err
    # finished means published and cleaned: the store verifies and no staging is left behind
    code, vout, verr = rl("verify", "--store", store)
    assert code == 0, vout + verr
    assert not [d for d in os.listdir(os.path.join(store, "_rocketlake")) if "staging" in d]


# --------------------------------------------------------------------------- item 8: empty bodies
def test_empty_body_refused_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKETLAKE_ALLOW_EMPTY_BODY", raising=False)
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=b"a"), _line(body=b""), _line(body=b"c")])
    store = str(tmp_path / "store")
    code, out, err = rl("ingest", "--store", store, "--input", src, "--quiet")
    assert code == 2, err
    assert f"{src} line 2: field 'body_b64': empty body" in err and "--allow-empty-body" in err
    assert "line 1" not in err and "line 3" not in err
    assert not os.path.exists(os.path.join(store, "commitlog"))
    code, out, err = rl("ingest", "--store", store, "--input", src, "--quiet", "--allow-empty-body",
                        "--config", DEMO_CONF)
    assert code == 0 and "messages=3" in out, err


def test_an_empty_body_is_named_by_the_field_the_line_gave_it_in(tmp_path, monkeypatch):
    """A JSON line's body may be UTF-8 text in 'body' or base64 in 'body_b64': an empty one is
    refused naming the field that line wrote (every empty text body was named 'body_b64'); a line
    with neither names both."""
    monkeypatch.delenv("ROCKETLAKE_ALLOW_EMPTY_BODY", raising=False)
    text = {"topic": "t", "body": ""}
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(), text, _line(body=b""), {"topic": "t", "body": "x"},
                                               {"topic": "t"}])
    store = str(tmp_path / "store")
    code, _out, err = rl("ingest", "--store", store, "--input", src, "--quiet")
    assert code == 2, err
    assert f"{src} line 2: field 'body': empty body" in err, err
    assert f"{src} line 3: field 'body_b64': empty body" in err, err
    assert f"{src} line 5: field 'body' / 'body_b64': missing" in err, err
    assert "line 1" not in err and "line 4" not in err
    assert not os.path.exists(os.path.join(store, "commitlog"))
    only_text = _write_jsonl(tmp_path / "text.jsonl", [text])
    code, _out, err = rl("ingest", "--store", store, "--input", only_text, "--quiet")
    assert code == 2 and f"{only_text} line 1: field 'body': empty body" in err, err


def test_empty_body_refused_by_the_python_api(tmp_path, monkeypatch):
    from storelib.errors import InputError
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    monkeypatch.delenv("ROCKETLAKE_ALLOW_EMPTY_BODY", raising=False)
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=b"")] * 25)
    with pytest.raises(InputError) as e:
        run_ingest(LocalSession(), str(tmp_path / "s"), src, "jsonl", load_config(DEMO_CONF), quiet=True)
    assert e.value.total == 25 and "more" in str(e.value).splitlines()[-1], str(e.value)
    assert f"{src} line 1: field 'body_b64': empty body" in str(e.value)
    monkeypatch.setenv("ROCKETLAKE_ALLOW_EMPTY_BODY", "1")
    assert run_ingest(LocalSession(), str(tmp_path / "s"), src, "jsonl", load_config(DEMO_CONF),
                      quiet=True)["messages"] == 25


def test_large_body_reported_once(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(), _line(body=b"x" * (5 << 20))])
    code, _out, err = rl("ingest", "--store", str(tmp_path / "store"), "--input", src, "--quiet")
    assert code == 2
    said = [x for x in err.splitlines() if "line 2" in x]
    assert len(said) == 1 and "exceeds maxMessageSize 4194304" in said[0], err
    assert "1 bad input row problem(s)" in err


# --------------------------------------------------------------------------- item 9: every bad row
def test_every_bad_row_in_the_words_of_the_input_schema(tmp_path):
    rows = [_line() for _ in range(12)]
    rows[3]["queue_id"] = "3"
    rows[4]["store_timestamp"] = "yesterday"
    rows[5]["topic"] = 5
    rows[6]["properties"] = "KEYS=a"
    rows[7]["flag"] = 1.5
    rows[9] = '{"topic": "t", oops}'
    rows[11] = "[1, 2]"
    src = _write_jsonl(tmp_path / "bad.jsonl", rows)
    code, out, err = rl("ingest", "--store", str(tmp_path / "store"), "--input", src, "--quiet", "--partitions", "3")
    assert code == 2 and out == ""
    want = {4: "field 'queue_id': expected an integer (int32), got a string \"3\"",
            5: "field 'store_timestamp': expected epoch milliseconds or an ISO-8601 time",
            6: "field 'topic': expected a string, got a number 5",
            7: "field 'properties': expected [name, value] pairs or an object",
            8: "field 'flag': expected an integer (int32), got a number 1.5",
            10: "invalid JSON", 12: "expected a JSON object, got an array"}
    assert "7 bad input row problem(s)" in err, err
    for line, what in want.items():
        assert f"{src} line {line}: {what}" in err, (line, err)
    assert "Column(" not in err and "changed from" not in err
    assert not os.path.exists(str(tmp_path / "store" / "commitlog"))


def test_bad_rows_past_the_limit_are_counted(tmp_path):
    rows = [_line(queue_id="x") for _ in range(30)]
    src = _write_jsonl(tmp_path / "bad.jsonl", rows)
    code, _out, err = rl("ingest", "--store", str(tmp_path / "store"), "--input", src, "--quiet")
    assert code == 2 and "30 bad input row problem(s)" in err and err.rstrip().endswith("... 10 more"), err
    assert f"{src} line 20: field 'queue_id'" in err and f"{src} line 21:" not in err


def test_iso_store_timestamp_and_properties_object_as_pairs_and_ms(tmp_path):
    """The same messages given with ISO-8601 times and properties objects are the same bytes as
    with epoch ms and [name, value] pairs."""
    plain = [_line(body=bytes([65 + i]), store_timestamp=1717200000000 + i, born_timestamp=1717199999000,
                   properties=[["TAGS", "a"], ["KEYS", f"k{i}"]]) for i in range(6)]
    fancy = [dict(r) for r in plain]
    for i, r in enumerate(fancy):
        r["store_timestamp"] = f"2024-06-01T00:00:00.00{i}Z"
        r["born_timestamp"] = "2024-05-31 23:59:59+00:00"
        r["properties"] = {"TAGS": "a", "KEYS": f"k{i}"}
    a = _write_jsonl(tmp_path / "a.jsonl", plain)
    b = _write_jsonl(tmp_path / "b.jsonl", fancy)
    for name, src in (("sa", a), ("sb", b)):
        code, out, err = rl("ingest", "--store", str(tmp_path / name), "--input", src, "--quiet",
                            "--batch-id", "one", "--config", DEMO_CONF)
        assert code == 0, err
    for sub in ("commitlog", "consumequeue/t/0"):
        da, db = tmp_path / "sa" / sub, tmp_path / "sb" / sub
        assert sorted(os.listdir(da)) == sorted(os.listdir(db))
        for f in os.listdir(da):
            assert (da / f).read_bytes() == (db / f).read_bytes(), f


# --------------------------------------------------------------------------- item 10: the input format
def test_input_format_inferred_and_said(tmp_path):
    import pyarrow.parquet as pq
    from deltalake import write_deltalake
    from storelib.ingest.inputs import canonical_to_parquet_input, read_all
    table = canonical_to_parquet_input(read_all(SAMPLE, "jsonl").slice(0, 30))
    pq.write_table(table.slice(0, 10), str(tmp_path / "more.data"))        # no .parquet: the magic tells
    write_deltalake(str(tmp_path / "delta"), table.slice(10, 10))
    jdir = tmp_path / "jdir"
    (jdir / "_spark_metadata").mkdir(parents=True)
    (jdir / "_spark_metadata" / "0.json").write_text('{"version": 1}\n')
    _write_jsonl(jdir / "part-0.jsonl", [_line(body=b"j")])
    store = str(tmp_path / "store")
    for src, fmt, n in ((tmp_path / "more.data", "parquet", 10), (tmp_path / "delta", "delta", 10), (jdir, "jsonl", 1)):
        code, out, err = rl("ingest", "--store", store, "--input", src, "--config", DEMO_CONF, "--local", "always")
        assert code == 0 and f"messages={n} " in out, err
        assert f"input format: {fmt} (" in err, err
    # an explicit format that cannot be right is one line, before any byte is read as input
    for src, fmt, hint in ((tmp_path / "more.data", "jsonl", "--format parquet"),
                           (tmp_path / "delta", "parquet", "--format delta"),
                           (tmp_path / "delta", "jsonl", "--format delta")):
        code, out, err = rl("ingest", "--store", store, "--input", src, "--format", fmt, "--quiet")
        assert code == 2 and hint in err and err.count("\n") <= 3, err


# --------------------------------------------------------------------------- items 11, 12: a command line
def test_export_into_a_non_empty_directory_is_a_bad_argument(tmp_path):
    store = _small_store(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    code, out, err = rl("export", "--store", store, "--to", target)
    line = one_line_error(err)
    assert code == 2 and out == "" and "is not empty" in line and "rocketlake export" in line
    assert "damaged" not in line and "jobs/" not in line
    assert os.listdir(target) == ["notes.txt"]


def _tree(store: str) -> dict:
    return {os.path.relpath(os.path.join(d, n), store): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _, names in os.walk(store) for n in names}


@pytest.mark.parametrize("argv", [
    ("ingest", "--input", "IN"), ("expire", "--reserved-hours", "1"), ("repair", "--apply")])
@pytest.mark.parametrize("batch_id", ["1", "007", "z" * 300, "a/b", ".."])
def test_a_batch_id_that_cannot_name_its_batch_is_exit_2(tmp_path, argv, batch_id):
    """--as-of-batch reads digits as a sequence number (a batch called "1" committed as seq 4 made
    `--as-of-batch 1` read seq 4, not seq 1); a staging directory is named by the id."""
    store = _small_store(tmp_path)
    src = _write_jsonl(tmp_path / "more.jsonl", [_line(body=b"more")])
    before = _tree(store)
    code, out, err = rl(*[src if a == "IN" else a for a in argv], "--store", store, "--batch-id", batch_id, "--quiet")
    line = one_line_error(err)
    assert code == 2 and out == "" and "batch id" in line, (code, err)
    assert _tree(store) == before


@pytest.mark.parametrize("rules", [("--topic", "orderz", "--reserved-hours", "1"),
                                   ("--topic", "t", "--reserved-hours", "1", "--topic", "t", "--reserved-hours", "2")])
@pytest.mark.parametrize("dry", [(), ("--dry-run",)])
def test_expire_of_a_topic_the_store_lacks_or_ruled_twice_is_exit_2(tmp_path, rules, dry):
    """A mistyped --topic expired nothing and said nothing wrong (exit 0); two rules for one topic
    kept the last silently."""
    store = _small_store(tmp_path)
    before = _tree(store)
    code, out, err = rl("expire", "--store", store, *rules, *dry)
    line = one_line_error(err)
    assert code == 2 and out == "" and (("orderz" in line and "'t'" in line) if "orderz" in rules
                                        else "--topic t" in line), (code, out, err)
    assert _tree(store) == before


def test_import_of_another_directory_into_an_adopted_store_is_refused(tmp_path):
    """A store adopted from one broker directory answered an import of another one with
    status=already-committed (exit 0), though none of its messages were imported."""
    exports = []
    for name in ("a", "b"):
        store = str(tmp_path / f"src-{name}")
        code, _out, err = rl("ingest", "--store", store, "--input", _write_jsonl(tmp_path / f"{name}.jsonl", [
            _line(body=name.encode())]), "--config", DEMO_CONF, "--quiet")
        assert code == 0, err
        exports.append(str(tmp_path / f"export-{name}"))
        code, _out, err = rl("export", "--store", store, "--to", exports[-1])
        assert code == 0, err
    store = str(tmp_path / "adopted")
    code, out, err = rl("ingest", "--store", store, "--from-store", exports[0], "--quiet")
    assert code == 0 and "status=committed" in out + err, out + err
    code, out, err = rl("ingest", "--store", store, "--from-store", exports[0], "--quiet")
    assert code == 0 and "status=already-committed" in out + err, out + err
    before = _tree(store)
    code, out, err = rl("ingest", "--store", store, "--from-store", exports[1], "--quiet")
    line = one_line_error(err)
    assert code == 2 and "already-committed" not in out and exports[0] in line and exports[1] in line, (code, err)
    assert _tree(store) == before


def test_format_parquet_on_a_file_that_is_not_parquet_is_exit_2(tmp_path):
    store = _small_store(tmp_path)
    before = _tree(store)
    src = _write_jsonl(tmp_path / "more.jsonl", [_line(body=b"more")])
    code, out, err = rl("ingest", "--store", store, "--input", src, "--format", "parquet", "--quiet")
    assert code == 2 and out == "" and "Traceback" not in err and "more.jsonl" in err and "Parquet" in err, (code, err)
    assert _tree(store) == before


@pytest.mark.parametrize("argv", [("ingest", "--input", "IN", "--json-summary"),
                                  ("expire", "--reserved-hours", "1", "--json-summary"),
                                  ("repair", "--apply", "--json-summary"),
                                  ("query", "range", "--begin", "0", "--end", "1", "--output")])
@pytest.mark.parametrize("where", ["nosuchdir/out.json", "adir"])
def test_an_output_file_that_cannot_be_written_is_exit_2_before_any_work(tmp_path, argv, where):
    """An ingest committed its batch, then failed on its --json-summary with a traceback, exit 1."""
    store = _small_store(tmp_path)
    (tmp_path / "adir").mkdir()
    src = _write_jsonl(tmp_path / "more.jsonl", [_line(body=b"more")])
    before = _tree(store)
    argv = [src if a == "IN" else a for a in argv]
    if argv[0] == "query":
        argv = ["query", "--store", store, *argv[1:]]
    else:
        argv = [*argv[:1], "--store", store, *argv[1:]]
    code, out, err = rl(*argv, str(tmp_path / where))
    line = one_line_error(err)
    assert code == 2 and out == "" and where.split("/")[0] in line, (code, out, err)
    assert _tree(store) == before


@pytest.mark.parametrize("version", ["999", "-1"])
def test_a_version_the_checkpoints_table_lacks_is_exit_2(tmp_path, version):
    store = _small_store(tmp_path)
    for argv in (("inspect", "--store", store, "segments"), ("verify", "--store", store)):
        code, out, err = rl(*argv, "--version", version)
        line = one_line_error(err)
        assert code == 2 and out == "" and f"version {version}" in line and "0..0" in line, (argv, code, err)


def test_mirror_of_a_broker_directory_an_export_made_takes_its_sizes(tmp_path):
    """A broker restored from an export keeps its rocketlake.properties: a mirror of it takes the
    sizes from there (as verify does), not off an index file that fits no 1:4 ratio ("damaged")."""
    store = str(tmp_path / "store")
    rows = [_line(store_timestamp=1717200000000 + i) for i in range(3)]
    code, _out, err = rl("ingest", "--store", store, "--input", _write_jsonl(tmp_path / "in.jsonl", rows),
                         "--config", DEMO_CONF, "--quiet")
    assert code == 0, err
    broker = str(tmp_path / "restored")
    code, _out, err = rl("export", "--store", store, "--to", broker)
    assert code == 0, err
    mirror = str(tmp_path / "mirror")
    code, out, err = rl("mirror", "--from", broker, "--store", mirror, "--once", "--quiet")
    assert code == 0, out + err
    code, out, err = rl("verify", "--store", mirror, "--deep")
    assert code == 0 and "status=ok" in out + err, out + err
    code, out, err = rl("query", "--store", mirror, "key", "--topic", "t", "--key", "k")
    assert code == 0 and "2 message(s)" in err, err         # (the last: past the broker's safe point)


def _expired_after_its_first_batch(tmp_path) -> tuple[str, str]:
    """(store, the expiry's batch id): six 100 KB messages in small segments, then an expiry that
    deleted batch 1's first segments."""
    store = str(tmp_path / "store")
    rows = [_line(body=bytes([65 + i]) * 100_000, store_timestamp=1717200000000 + i) for i in range(6)]
    code, _out, err = rl("ingest", "--store", store, "--input", _write_jsonl(tmp_path / "big.jsonl", rows),
                         "--config", DEMO_CONF, "--quiet")
    assert code == 0, err
    code, out, err = rl("expire", "--store", store, "--reserved-hours", "1", "--quiet")
    assert code == 0 and "commitlog_removed=0" not in out + err, out + err
    expiry = (out + err).split("batch_id=")[1].split()[0]
    return store, expiry


def test_export_of_a_batch_whose_files_an_expiry_removed(tmp_path):
    """A batch before an expiry cannot be exported once the expiry deleted its segments: one line
    naming the file and the expiry (exit 2), not a bare "No such file or directory" (exit 1)."""
    store, expiry = _expired_after_its_first_batch(tmp_path)
    target = tmp_path / "restored"
    code, out, err = rl("export", "--store", store, "--to", target, "--as-of-batch", "1")
    line = one_line_error(err)
    assert code == 2 and out == "" and "commitlog/00000000000000000000" in line and expiry in line, (code, err)
    assert not target.exists()
    code, out, err = rl("verify", "--store", store, "--as-of-batch", "1")     # (verify rebuilds it by an export)
    assert code == 2 and out == "" and expiry in one_line_error(err), (code, err)
    code, _out, err = rl("export", "--store", store, "--to", target, "--as-of-batch", expiry)
    assert code == 0, err


def test_lookups_of_a_batch_whose_files_an_expiry_removed(tmp_path):
    """query, inspect stats and the store browser as of a batch before an expiry: a lookup that
    needs a file the expiry deleted says so in one line naming the file and the expiry (exit 2,
    the page 400), not "missing file" (exit 1, 500: a damaged store); one that needs no such file
    answers; a live file that is missing is still a damaged store."""
    from storelib.ui.server import create_app
    store, expiry = _expired_after_its_first_batch(tmp_path)
    for argv in (("query", "--store", store, "--as-of-batch", "1", "offset", "--topic", "t", "--queue", "0",
                  "--offset", "0"),
                 ("query", "--store", store, "--as-of-batch", "1", "key", "--topic", "t", "--key", "k"),
                 ("query", "--store", store, "--as-of-batch", "1", "range", "--begin", "2024-06-01", "--end",
                  "2024-06-02"),
                 ("inspect", "--store", store, "--as-of-batch", "1", "stats")):
        code, out, err = rl(*argv)
        line = one_line_error(err)
        assert code == 2 and out == "" and expiry in line and " was deleted by the expiry " in line, (argv, code, err)
    code, out, err = rl("query", "--store", store, "--as-of-batch", "1", "offset", "--topic", "t", "--queue", "0",
                        "--offset", "5")
    assert code == 0 and "1 message(s)" in err, err           # (the last segment: kept)
    client = create_app(store).test_client()
    for page in ("/topics?batch=1", "/find?mode=offset&topic=t&queue=0&offset=0&batch=1"):
        r = client.get(page)
        assert r.status_code == 400 and expiry in r.get_data(as_text=True), (page, r.status_code)
    last = sorted(os.listdir(os.path.join(store, "commitlog")))[-1]
    os.remove(os.path.join(store, "commitlog", last))
    code, out, err = rl("query", "--store", store, "--as-of-batch", "1", "offset", "--topic", "t", "--queue", "0",
                        "--offset", "5")
    assert code == 1 and "missing file" in err and expiry not in err, (code, err)


@pytest.mark.parametrize("argv", [
    ("ingest", "--input", SAMPLE), ("verify",), ("inspect", "stats"), ("expire", "--reserved-hours", "1", "--dry-run"),
    ("repair",)])
def test_a_missing_config_file_is_exit_2(tmp_path, argv):
    store = _small_store(tmp_path)
    code, _out, err = rl(*argv, "--store", store, "--config", str(tmp_path / "nosuch.properties"))
    assert code == 2 and "nosuch.properties" in one_line_error(err) and "Traceback" not in err


def test_store_after_the_subcommand_version_and_no_arguments(tmp_path):
    import storelib
    store = str(tmp_path / "store")
    assert rl("ingest", "--input", _write_jsonl(tmp_path / "in.jsonl", [_line()]), "--store", store,
              "--config", DEMO_CONF, "--quiet")[0] == 0
    for argv in (("inspect", "stats", "--store", store), ("inspect", "--store", store, "stats"),
                 ("inspect", "checkpoints", "--json", "--store", store),
                 ("query", "range", "--begin", "0", "--end", "2030-01-01", "--store", store), ("verify", "--store", store)):
        code, out, err = rl(*argv)
        assert code == 0 and (out or err), (argv, err)
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert f'version = "{storelib.__version__}"' in text
    code, out, _ = rl("--version")
    assert code == 0 and out.strip() == f"rocketlake {storelib.__version__}"
    code, out, err = rl()
    assert code == 2 and out == "" and err.startswith("usage: rocketlake COMMAND")
    code, out, err = rl("--master", "local[1]")
    assert code == 2 and "a command is required" in err


# --------------------------------------------------------------------------- item 14: register needs a catalog
def test_register_refuses_the_in_memory_catalog(tmp_path):
    store = _small_store(tmp_path)
    work = tmp_path / "cwd"
    work.mkdir()
    code, out, err = rl("inspect", "--store", store, "register", "--database", "d", cwd=str(work))
    line = one_line_error(err)
    assert code == 2 and out == ""
    assert "in-memory catalog" in line and "spark.sql.catalogImplementation=hive" in line
    assert os.listdir(work) == []               # no ./spark-warehouse/, no metastore_db/


# --------------------------------------------------------------------------- item 17: what a user reads
def test_query_words_a_user_sees(tmp_path):
    store = _small_store(tmp_path, 2)
    code, out, _ = rl("query", "--help")
    assert code == 0 and not any(w in out for w in ("golden", "StoreReader", "rangescan", "scan_range"))
    code, out, err = rl("query", "--store", store, "id", "ZZZ")
    line = one_line_error(err)
    assert code == 2 and "fromhex" not in line and "32 hex characters" in line
    csv_path = tmp_path / "all.csv"
    code, _out, err = rl("query", "--store", store, "range", "--begin", "2024-01-01", "--end", "2025-01-01",
                         "--output", csv_path)
    assert code == 0, err
    data = csv_path.read_bytes()
    assert data.count(b"\n") == 3 and b"\r" not in data
    # a mistyped topic is named as such by every lookup of one topic, not as a key it lacks
    for argv in (("key", "--key", "k"), ("unique-key", "--key", "k"), ("offset", "--queue", "0", "--offset", "0"),
                 ("time", "--queue", "0", "--timestamp", "0"),
                 ("range", "--begin", "2024-01-01", "--end", "2025-01-01")):
        code, out, err = rl("query", "--store", store, argv[0], "--topic", "tt", *argv[1:])
        assert code == 0 and err.strip() == "nothing found: no topic 'tt' in this store", (argv, err)


def test_docs_say_what_a_user_sees():
    import re
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    texts = re.findall(r"```text\n(.*?)```", readme, re.S)
    first = next(t for t in texts if "as seq 1" in t)
    committed = re.search(r"committed batch (\S+) as seq 1", first).group(1)
    assert f"batch_id={committed} batch_seq=1 " in first
    stats = next(t for t in texts if t.startswith("store: "))
    assert f"batch_id={committed} " not in stats            # the store's latest batch is the second one
    assert "retention" in stats and "held_back_bytes" in stats
    rows = {ln.split()[0]: ln.split() for ln in stats.splitlines()
            if ln.split() and ln.split()[0] in ("commitlog", "consumequeue", "index", "checkpoint", "total")}
    assert sum(int(rows[k][1]) for k in ("commitlog", "consumequeue", "index", "checkpoint")) == int(rows["total"][1])
    assert ".venv/` takes about" in readme
    streaming = open(os.path.join(ROOT, "docs", "STREAMING.md"), encoding="utf-8").read()
    assert 'README "Input schema"' not in streaming and "DESIGN.md#input-schema" in streaming
    assert "availableNow" in streaming and "processingTime" in streaming
    ops = open(os.path.join(ROOT, "docs", "OPERATIONS.md"), encoding="utf-8").read()
    assert not re.search(r"(^|\$ |`)python jobs/", ops, re.M)


# --------------------------------------------------------------------------- item 15: a first run is not a compile
@pytest.mark.slow
def test_install_compiles_the_kernels_a_first_command_needs(tmp_path):
    """`make install` runs storelib.cli.warmcache; after it a first `verify --deep` and `query range`
    in a fresh process load every kernel from numba's cache and compile none."""
    from storelib.cli import warmcache
    make = open(os.path.join(ROOT, "Makefile")).read()
    assert re_install_needs(make, "$(KERNELS_STAMP)") and "-m storelib.cli.warmcache" in make
    steps = warmcache.warm()
    assert [s for s in steps if s[1] != 0] == [], steps
    store = _small_store(tmp_path, 2)
    env = dict(_child_env(), NUMBA_DEBUG_CACHE="1")
    for argv in (("verify", "--store", store, "--deep"), ("query", "--store", store, "range", "--begin", "0",
                                                         "--end", "2100-01-01")):
        r = subprocess.run([sys.executable, "-m", "storelib.cli.main", *argv], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        saved = [x for x in (r.stdout + r.stderr).splitlines() if x.startswith("[cache] data saved")]
        assert saved == [], (argv, saved)


def re_install_needs(makefile: str, target: str) -> bool:
    line = next(x for x in makefile.splitlines() if x.startswith("install:"))
    return target in line.split()


# --------------------------------------------------------------------------- item 16: one progress display
def test_no_polling_line_into_sparks_own_progress_bar(capsys):
    """ingest_dataframe in a user's session: Spark draws its progress bar; ours would be drawn into
    it, so the polling line stays off (stage lines still print)."""
    from types import SimpleNamespace
    from storelib.runtime.progress import Progress

    def context(bar: bool):
        option = SimpleNamespace(isDefined=lambda: bar)
        return SimpleNamespace(_jsc=SimpleNamespace(sc=lambda: SimpleNamespace(progressBar=lambda: option)))
    for bar in (True, False):
        p = Progress(False, context(bar), interval=0.05)
        p.stage("encode", 2)
        assert (p._thread is None) is bar
        p.stage(None)
    p = Progress(False, context(True))
    p.say("committed batch b as seq 1")
    assert "committed batch b as seq 1" in capsys.readouterr().err


def test_parquet_store_timestamp_as_iso_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    body = [b"a", b"b", b"c"]
    ms = [1717200000000, 1717200000005, 1717228800000]
    text = ["2024-06-01T00:00:00Z", "2024-06-01T00:00:00.005Z", "2024-06-01 16:00:00+08:00"]
    for name, ts in (("ms", pa.array(ms, pa.int64())), ("iso", pa.array(text))):
        pq.write_table(pa.table({"topic": ["t"] * 3, "queue_id": pa.array([0] * 3, pa.int32()), "body": body,
                                 "store_timestamp": ts}), str(tmp_path / f"{name}.parquet"))
        code, _out, err = rl("ingest", "--store", str(tmp_path / name), "--input", tmp_path / f"{name}.parquet",
                             "--config", DEMO_CONF, "--quiet", "--batch-id", "one")
        assert code == 0, err
    for f in os.listdir(tmp_path / "ms" / "commitlog"):
        assert (tmp_path / "ms" / "commitlog" / f).read_bytes() == (tmp_path / "iso" / "commitlog" / f).read_bytes()
    pq.write_table(pa.table({"topic": ["t"], "body": [b"x"], "store_timestamp": ["noon"]}), str(tmp_path / "bad.parquet"))
    code, _out, err = rl("ingest", "--store", str(tmp_path / "bad"), "--input", tmp_path / "bad.parquet", "--quiet")
    assert code == 2 and "row 0: field 'store_timestamp': expected epoch milliseconds or an ISO-8601 time" in err, err


def test_a_second_signal_after_the_commit_ends_the_job_committed(tmp_path):
    store, gate = str(tmp_path / "store"), str(tmp_path / "gate")
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=bytes([65 + i])) for i in range(5)])
    env = dict(_child_env(), ROCKETLAKE_HOLD=f"after-publish-before-cleanup:{gate}")
    p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "ingest", "--store", store, "--input", src,
                          "--config", DEMO_CONF, "--quiet"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".reached") and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)               # the gate stays shut: the job is stuck after its commit
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "SIGTERM arrived after the batch was committed: the batch is in the store" in err
    code, out, err = rl("ingest", "--store", store, "--input", src, "--quiet")       # the rerun finishes it
    assert code == 0 and "already" in out + err, out + err
    assert rl("verify", "--store", store)[0] == 0


@pytest.mark.parametrize("command,flag,value", [
    ("ingest", "--store-timestamp", "-5"), ("ingest", "--store-timestamp", "1969-12-31"),
    ("ingest", "--store-timestamp", str(2**63)), ("expire", "--now", "-1"), ("expire", "--now", str(2**64)),
    ("query", "--begin", str(-2**63 - 1)), ("query", "--end", str(2**63)), ("query", "--timestamp", str(2**63))])
def test_a_time_option_before_1970_or_past_64_bits_is_refused_before_any_work(tmp_path, command, flag, value):
    """A time a broker does not stamp (epoch ms below 0, or past RocketMQ's signed 64-bit field)
    given to an ingest's or an expiry's option, or a time past the signed 64-bit field given to a
    query: one line naming the option and the bounds, exit 2, and nothing made or changed (an
    ingest's new store directory is not even created)."""
    src = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "body": "no store time"}])
    store = tmp_path / "store"
    if command != "ingest":
        code, _out, err = rl("ingest", "--store", store, "--input", src, "--store-timestamp", "1717200000000",
                             "--quiet")
        assert code == 0, err
    before = sorted((p, os.path.getsize(os.path.join(d, p))) for d, _, fs in os.walk(store) for p in fs)
    argv = {"ingest": ["ingest", "--store", store, "--input", src, flag, value, "--quiet"],
            "expire": ["expire", "--store", store, "--reserved-hours", "1", flag, value, "--quiet"],
            "query": ["query", "--store", store, *(["time", "--topic", "t", "--queue", "0"] if flag == "--timestamp"
                                                  else ["range", "--begin", "0", "--end", "1"]), flag, value]}[command]
    code, out, err = rl(*argv)
    assert code == 2 and out == "", (code, out, err)
    assert f"argument {flag}: {value!r}" in err and ("before 1970" in err or "64-bit" in err), err
    after = sorted((p, os.path.getsize(os.path.join(d, p))) for d, _, fs in os.walk(store) for p in fs)
    assert after == before and (command != "ingest" or not store.exists())


def test_messages_stored_before_1970_are_found_by_time(tmp_path):
    """An ingest keeps an input row's store time before 1970 (replicated data is the authority);
    ``query time`` and ``query range`` find those messages by time, as RocketMQ's lookups take any
    long and the Python API does."""
    src = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "queue_id": 0, "body": b, "store_timestamp": ts}
                                              for b, ts in (("older", -9000), ("old", -5000), ("new", 1717200000000))])
    store = tmp_path / "store"
    code, _out, err = rl("ingest", "--store", store, "--input", src, "--quiet")
    assert code == 0, err
    code, out, err = rl("query", "--store", store, "time", "--topic", "t", "--queue", "0", "--timestamp", "-6000")
    assert code == 0, err
    got = json.loads(out)
    # RocketMQ's binary search (ConsumeQueue.binarySearchInQueueByTime) takes a negative store time
    # for a failed read and answers 0; the API answers the same
    from storelib.read.query import open_store
    assert got["queue_offset"] == open_store(str(store)).get_offset_in_queue_by_time("t", 0, -6000) == 0, out
    code, out, err = rl("query", "--store", store, "--local", "always", "range", "--begin", "1969-12-31T23:59:50Z",
                        "--end", "-1", "--body-as", "text")
    assert code == 0, err
    assert "old" in out and "older" in out and "new" not in out.replace("older", ""), out


def test_an_ingest_given_a_default_store_time_before_1970_refuses_it_before_any_work(tmp_path):
    """The library's ``store_timestamp`` (and the sink's ``storeTimestamp``, which goes the same
    way): BadInput (exit 2) before the store directory is made, not an OverflowError mid-encode."""
    from storelib.errors import BadInput
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    src = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "body": "no store time"}])
    for ms in (-1, 2**63):
        with pytest.raises(BadInput, match="store timestamp .*nothing was written"):
            run_ingest(LocalSession(), str(tmp_path / "store"), src, "jsonl", load_config(None), store_timestamp=ms,
                       quiet=True)
        assert not (tmp_path / "store").exists()
